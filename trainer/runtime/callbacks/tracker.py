"""The best epoch by validation loss, and early stopping once it is stale (fastai's callback/tracker.py, for stages)."""

from __future__ import annotations

import math

from fastai.callback.core import Callback, CancelFitException

from trainer.runtime import distributed as D
from trainer.runtime.callbacks.core import NO_PHASE, Phase, skipped
from trainer.runtime.callbacks.progress import EpochLogCallback


class BestEpochCallback(Callback):
    """Hands the weights of each epoch with a new lowest validation loss to `keep` (before the epoch's checkpoint)."""

    run_after, run_before = EpochLogCallback, "CheckpointCallback"  # the checkpoint carries the best weights

    def __init__(self, keep):
        self.keep = keep  # keep(learn, stage, epoch, valid_loss)
        self.begin_phase(NO_PHASE)

    def begin_phase(self, phase: Phase) -> None:
        self.stage, self.offset = phase.stage, phase.offset

    def after_epoch(self):
        if skipped(self.learn, self.epoch):
            return
        values = dict(zip(self.recorder.metric_names, self.recorder.log))
        try:
            loss = float(values.get("valid_loss"))
        except (TypeError, ValueError):
            return
        if not math.isnan(loss):
            self.keep(self.learn, self.stage, self.offset + self.epoch + 1, loss)


class PatienceCallback(Callback):
    """Stops the stage's fit once `stale()` epochs passed without a lower validation loss (after the epoch's
    checkpoint)."""

    run_after = "CheckpointCallback"  # the epoch is saved first: a resume finds it

    def __init__(self, ctx: D.Context, stale, patience: int):
        self.ctx, self.stale, self.patience = ctx, stale, patience  # stale(stage, epoch) -> epochs since the best
        self.stopped = 0  # the epoch it stopped after
        self.begin_phase(NO_PHASE)

    def begin_phase(self, phase: Phase) -> None:
        self.stage, self.offset = phase.stage, phase.offset

    def after_epoch(self):
        if skipped(self.learn, self.epoch) or self.patience <= 0:
            return
        epoch = self.offset + self.epoch + 1
        # Only rank 0 validates (trainer.runtime.distributed): it decides, every rank stops at the same epoch.
        stale = self.stale(self.stage, epoch) >= self.patience if self.ctx.main else None
        if D.broadcast(self.ctx, stale):
            self.stopped = epoch
            raise CancelFitException()
