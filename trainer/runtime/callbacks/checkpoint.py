"""Exact-resume checkpoints: every epoch, every few minutes, and on SIGTERM."""

from __future__ import annotations

import time

from fastai.callback.core import Callback, CancelFitException

from trainer.runtime import distributed as D
from trainer.runtime.callbacks.core import NO_PHASE, Phase, skipped
from trainer.runtime.callbacks.progress import StatusCallback
from trainer.runtime.callbacks.resume import lm_hidden
from trainer.runtime.checkpoints import Position, rng_state
from trainer.runtime.preemption import Preemption


class CheckpointCallback(Callback):
    """Saves an exact-resume checkpoint every epoch, every `minutes`, and on SIGTERM (then stops the fit)."""

    run_after = StatusCallback

    def __init__(self, ctx: D.Context, preemption: Preemption, save, *, minutes: float):
        self.ctx, self.preemption, self.save, self.every_s = ctx, preemption, save, minutes * 60
        self.begin_phase(NO_PHASE)

    def begin_phase(self, phase: Phase) -> None:
        self.stage, self.phase_idx, self.last_phase = phase.stage, phase.index, phase.saves_done and phase.last

    def before_fit(self):
        self.preemption.in_fit = True
        self.last_save = time.monotonic()

    def before_train(self):
        self.rng_epoch = rng_state()

    def after_batch(self):
        learn = self.learn  # read directly: a callback's own lookup falls back to the learner's (microseconds)
        if not learn.training or len(learn.yb) == 0:  # validation, or a batch ResumeCallback skipped
            return
        due = self.every_s > 0 and time.monotonic() - self.last_save >= self.every_s
        stop, due = D.any_rank(self.ctx, self.preemption.requested, due)  # every rank decides alike
        if stop or due:
            self._save(Position(self.stage, self.phase_idx, self.epoch, self.iter + 1), hidden=lm_hidden(self.learn))
        if stop:
            raise CancelFitException()

    def after_epoch(self):
        if skipped(self.learn, self.epoch):
            return
        if self.epoch + 1 == self.n_epoch:
            position = Position(self.stage, self.phase_idx + 1, 0, 0, done=self.last_phase)
        else:
            position = Position(self.stage, self.phase_idx, self.epoch + 1, 0)
        self.rng_epoch = None  # the next epoch starts from the current state
        self._save(position)

    def after_fit(self):
        self.preemption.in_fit = False

    def save_done(self, stage: str, phases: int) -> None:
        """The stage's final checkpoint when it ends before its last epoch (PatienceCallback)."""
        self._save(Position(stage, phases, 0, 0, done=True))

    def _save(self, position: Position, hidden: list | None = None) -> None:
        """hidden: a language model's state inside an epoch (at an epoch's end the next one starts afresh)."""
        now = rng_state()
        states = D.gather(self.ctx, {"epoch": self.rng_epoch or now, "now": now, "hidden": hidden})
        self.save(self.learn, position, states)
        self.preemption.saved = position  # what a stop says it resumes from
        self.last_save = time.monotonic()
