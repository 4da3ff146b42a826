"""Trainer extras as fastai callbacks.

Each declares where it runs relative to the others (`run_after` / `run_before`, as fastai's own
callbacks do); `place` turns those into the `order` fastai's Learner sorts by, once, here.
The fitter (trainer.job.fitting) announces every phase with `begin_phase(Phase)`: each callback
keeps what it needs of it itself.
"""
from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field

from fastai.callback.core import Callback, CancelBatchException, CancelFitException, TrainEvalCallback
from fastai.callback.schedule import ParamScheduler
from fastai.learner import Recorder

from trainer import distributed as D
from trainer.job import heap
from trainer.checkpoints import Position, rng_state, set_rng_state
from trainer.job.runlog import RunLog
from trainer.records.runs import duration


class Interrupted(Exception):
    """SIGTERM arrived (Spot notice, destroy) or a peer rank went away; what could be saved is saved."""


def skipped(learn, epoch: int) -> bool:
    """fastai still fires after_epoch for epochs that fit(start_epoch=…) skips on resume."""
    skip = next((cb for cb in learn.cbs if type(cb).__name__ == "SkipToEpoch"), None)
    return skip is not None and epoch < skip._skip_to


class Preemption:
    """SIGTERM handling for the whole process: inside fit() a flag the batch loop polls (so a
    checkpoint can be written), outside it an immediate `Interrupted` (rank 0) or death (other
    ranks: nothing to save, and they may be blocked in a collective where Python cannot run)."""

    def __init__(self, ctx: D.Context):
        self.ctx, self.requested, self.in_fit = ctx, False, False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, _frame):
        self.requested = True
        if self.in_fit:
            return
        if not self.ctx.main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
        raise Interrupted("SIGTERM")

    def check(self) -> None:
        """Raise at a safe point if a signal arrived meanwhile."""
        if self.requested:
            raise Interrupted("SIGTERM")


def _lm_encoder(learn):
    """The AWD-LSTM of a language model, whose hidden state runs on from batch to batch (None otherwise:
    a classifier's encoder starts every batch afresh)."""
    from fastai.text.models.awdlstm import AWD_LSTM

    model = D.unwrap(learn.model)
    encoder = model[0] if len(model) else None
    return encoder if isinstance(encoder, AWD_LSTM) else None


def lm_hidden(learn) -> list | None:
    """A language model's LSTM hidden state (on the CPU), which a mid-epoch checkpoint must keep."""
    encoder = _lm_encoder(learn)
    if encoder is None:
        return None
    return [tuple(t.detach().cpu().clone() for t in layer) for layer in encoder.hidden]


@dataclass(frozen=True)
class Phase:
    """One fit_one_cycle of a stage, as the callbacks see it."""

    stage: str
    index: int  # of the stage's phases, from 0
    count: int  # phases in the stage
    offset: int  # epochs of the stage before this phase
    total: int  # epochs of the stage
    metric_names: dict = field(default_factory=dict)  # fastai's metric name -> the history's
    saves_done: bool = True  # the last epoch's checkpoint marks the stage done

    @property
    def label(self) -> str:
        return f"{self.index + 1}/{self.count}"

    @property
    def last(self) -> bool:
        return self.index == self.count - 1


NO_PHASE = Phase("", 0, 1, 0, 0, saves_done=False)  # what a callback knows before the fitter's first phase


class ResumeCallback(Callback):
    """Puts a resumed fit exactly where the checkpoint left it: RNG states, the batch position and a
    language model's hidden state."""

    run_after, run_before = TrainEvalCallback, Recorder  # pct_train is set for the epoch; no batch recorded yet

    def __init__(self, epoch: int, batch: int, rng_epoch: dict | None, rng_now: dict | None, hidden: list | None = None):
        self.epoch_at, self.batch_at, self.rng_epoch, self.rng_now = epoch, batch, rng_epoch, rng_now
        self.hidden = hidden
        self.active = True

    def before_train(self):
        if self.active and self.epoch == self.epoch_at and self.rng_epoch is not None:
            set_rng_state(self.rng_epoch)  # the same shuffle as the interrupted epoch

    def before_batch(self):
        if not (self.active and self.training and self.epoch == self.epoch_at):
            return
        if self.iter < self.batch_at:
            self.learn.yb = ()  # Recorder ignores the batch; TrainEvalCallback still advances the schedule
            raise CancelBatchException()
        # Mid-epoch: the dropout masks of an uninterrupted run from here on. At an epoch's start the
        # epoch's state (before_train) is already right: the loader has since drawn its order and
        # seed from it, as in the uninterrupted run; restoring it again would undo those draws.
        if self.rng_now is not None and self.batch_at:
            set_rng_state(self.rng_now)
        encoder = _lm_encoder(self.learn)
        # Mid-epoch only (at an epoch's start the LM starts afresh, as ModelResetter has just made it),
        # and for the batch size the state was saved with.
        bs = self.hidden[0][0].shape[1] if self.hidden else None
        if self.batch_at and encoder is not None and bs == self.learn.dls.train.bs:
            param = next(encoder.parameters())  # the LM reads on from where the text stopped
            encoder.hidden = [tuple(t.to(param.device, dtype=param.dtype) for t in layer) for layer in self.hidden]
            encoder.bs = bs
        self.active = False

    def after_train(self):
        # Saved after the epoch's last batch: no batch is left to restore the state at, and
        # the next epoch must start from the state the uninterrupted run had here.
        if self.active and self.epoch == self.epoch_at:
            if self.rng_now is not None:
                set_rng_state(self.rng_now)
            self.active = False

    def after_epoch(self):
        if self.epoch >= self.epoch_at:
            self.active = False


class EpochLogCallback(Callback):
    """One plain log line per epoch (no carriage-return bars) and the run history (rank 0)."""

    run_after = Recorder, ParamScheduler  # the epoch's values are written, the batch's rates recorded

    def __init__(self, log: RunLog, history: list[dict]):
        self.log, self.history = log, history
        self.begin_phase(NO_PHASE)

    def begin_phase(self, phase: Phase) -> None:
        self.stage, self.phase, self.offset, self.total = phase.stage, phase.label, phase.offset, phase.total
        self.names = phase.metric_names  # never a final metric's name

    def after_epoch(self):
        if skipped(self.learn, self.epoch):
            return
        record = {"stage": self.stage, "phase": self.phase, "epoch": self.offset + self.epoch + 1}
        for name, value in zip(self.recorder.metric_names[1:], self.recorder.log[1:]):
            if name == "time":
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            record[self.names.get(name, name)] = None if math.isnan(number) else round(number, 5)
        self.history.append(record)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in record.items() if isinstance(v, float))
        self.log.line(f"{self.stage} [{self.phase}] epoch {record['epoch']}/{self.total}  {shown}")


class StatusCallback(Callback):
    """Writes stage, epoch and the epoch's figures to status.json after every epoch so followers see progress (rank 0)."""

    run_after = EpochLogCallback  # the epoch's line is in log.txt (and `history`) before followers see the epoch

    def __init__(self, log: RunLog, history: list[dict] | None = None):
        self.log, self.history = log, history if history is not None else []
        self.begin_phase(NO_PHASE)

    def begin_phase(self, phase: Phase) -> None:
        self.offset = phase.offset

    def after_epoch(self):
        if skipped(self.learn, self.epoch):
            return
        last = self.history[-1] if self.history else {}
        self.log.update(epoch=self.offset + self.epoch + 1,
                        last_epoch={k: v for k, v in last.items() if k not in ("stage", "phase", "epoch")} or None)


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
    """Stops the stage's fit once `stale()` epochs passed without a lower validation loss (after the epoch's checkpoint)."""

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
        # Only rank 0 validates (trainer.distributed): it decides, every rank stops at the same epoch.
        stale = self.stale(self.stage, epoch) >= self.patience if self.ctx.main else None
        if D.broadcast(self.ctx, stale):
            self.stopped = epoch
            raise CancelFitException()


# A validation batch (forward only) before one has been timed in the stage, as a share of a training
# batch's time: the slower head's on the dev VM (full softmax 0.38, adaptive 0.77: its accuracy ranks clusters).
VALID_SHARE = 0.8


class BatchProgressCallback(Callback):
    """Inside an epoch: batch, tokens/s and ETAs (validation included) in log.txt and status.json every `every_s` s (rank 0)."""

    run_after = "CheckpointCallback"  # the same batch's save is done: an ETA never counts a save it has not seen

    def __init__(self, log: RunLog, *, every_s: float, world: int = 1, clock=time.monotonic):
        self.log, self.every_s, self.world, self.clock = log, every_s, world, clock
        self.stage, self.valid_per_batch, self.valid_started = None, None, None
        self.begin_phase(NO_PHASE)

    def begin_phase(self, phase: Phase) -> None:
        if phase.stage != self.stage:
            self.valid_per_batch = None  # another stage validates another model on other rows
        self.stage, self.offset, self.total = phase.stage, phase.offset, phase.total

    def before_validate(self):
        self.valid_started = self.clock()

    def after_validate(self):
        # a rank whose validation another callback cancelled before this one's before_validate ran: not timed
        if self.valid_started is not None and (n := len(self.dls.valid)):
            self.valid_per_batch = (self.clock() - self.valid_started) / n
        self.valid_started = None

    def before_train(self):
        self.started = self.last = None  # the clock starts at the first real batch (a resume skips some)
        self.batches = self.tokens = 0
        self.shown = False

    def after_batch(self):
        if not self.training or len(self.learn.yb) == 0:  # validation, or a batch ResumeCallback skipped
            return
        now = self.clock()
        if self.started is None:
            self.started = self.last = now
            return  # its duration is unknown: the rates count from the end of this batch
        self.batches += 1
        # every rank reads a batch of this shape (LM batches are bs x seq_len; padded classifier ones may differ)
        self.tokens += self.learn.xb[0].numel() * self.world
        if now - self.last < self.every_s or self.iter + 1 >= self.n_iter:
            return
        self.last, self.shown = now, True
        per_batch = (now - self.started) / self.batches
        epoch = self.offset + self.epoch + 1
        # each epoch ends with a pass over the validation rows (a pretrain's held-out lines: 10-20 % of a 1M-token epoch here)
        valid = len(self.dls.valid) * (self.valid_per_batch or VALID_SHARE * per_batch)
        eta_epoch = (self.n_iter - self.iter - 1) * per_batch + valid
        eta_stage = eta_epoch + (self.total - epoch) * (self.n_iter * per_batch + valid)
        rate = self.tokens / max(now - self.started, 1e-9)
        self.log.line(f"{self.stage} epoch {epoch}/{self.total}: batch {self.iter + 1:,}/{self.n_iter:,} "
                      f"({100 * (self.iter + 1) / self.n_iter:.0f}%), {rate:,.0f} tokens/s, epoch ETA "
                      f"{duration(eta_epoch)}" + (f", stage ETA {duration(eta_stage)}" if eta_stage > eta_epoch else ""))
        self.log.update(progress={"epoch": epoch, "batch": self.iter + 1, "batches": self.n_iter,
                                  "tokens_per_s": round(rate), "eta_s": round(eta_epoch),
                                  "stage_eta_s": round(eta_stage)})

    def _clear(self):
        if self.shown:  # progress is read as "inside an epoch": stale once the epoch or the fit ends
            self.log.update(progress=None)
            self.shown = False

    def after_train(self):
        self._clear()

    def after_fit(self):
        self._clear()  # a SIGTERM cancels the fit mid-epoch: after_train never runs


class HeapTrimCallback(Callback):
    """Returns freed heap pages to the OS every `every` training batches, so memory stays bounded (see trainer.job.heap)."""

    run_after = BatchProgressCallback  # last: nothing after it in the batch allocates

    def __init__(self, every: int = 20):
        self.every = every

    def after_batch(self):
        if self.training and (self.iter + 1) % self.every == 0:
            heap.trim()

    def after_epoch(self):
        heap.trim()  # validation's activations too


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
        if not self.training or len(self.learn.yb) == 0:  # validation, or a batch ResumeCallback skipped
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
        self.last_save = time.monotonic()


def _relations(cls, attr: str, ours: dict) -> list:
    value = getattr(cls, attr, None) or ()
    return [ours.get(v, v) if isinstance(v, str) else v for v in (value if isinstance(value, (tuple, list)) else (value,))]


def place(*classes: type) -> None:
    """Sets each class's `order` from its run_after/run_before: the smallest order after everything it
    runs after (fastai's callbacks keep theirs), checked against everything it runs before."""
    ours = {cls.__name__: cls for cls in classes}
    orders: dict[type, float] = {}
    pending = list(classes)
    while pending:
        ready = [cls for cls in pending
                 if all(a in orders or a not in ours.values() for a in _relations(cls, "run_after", ours))
                 and not any(cls in _relations(other, "run_before", ours) for other in pending if other is not cls)]
        if not ready:
            raise RuntimeError(f"callbacks with circular run_after/run_before: {[c.__name__ for c in pending]}")
        for cls in ready:
            after = [orders.get(a, getattr(a, "order", 0)) for a in _relations(cls, "run_after", ours)]
            after += [orders[o] for o in orders if cls in _relations(o, "run_before", ours)]
            orders[cls] = max(after, default=0) + 1
            pending.remove(cls)
    for cls, order in orders.items():
        for before in _relations(cls, "run_before", ours):
            limit = orders.get(before, getattr(before, "order", 0))
            if order >= limit:
                raise RuntimeError(f"{cls.__name__} must run before {before.__name__} (order {limit}), "
                                   f"but runs after what it follows (order {order})")
        cls.order = order


place(ResumeCallback, EpochLogCallback, StatusCallback, BestEpochCallback, CheckpointCallback, PatienceCallback,
      BatchProgressCallback, HeapTrimCallback)
