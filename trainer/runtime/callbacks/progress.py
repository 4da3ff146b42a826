"""What a follower sees: a log line per epoch, status.json after every epoch, batch progress and ETAs inside one."""

from __future__ import annotations

import math
import time

from fastai.callback.core import Callback
from fastai.callback.schedule import ParamScheduler
from fastai.learner import Recorder

from trainer.runfiles.durations import duration
from trainer.runtime.callbacks.core import NO_PHASE, Phase, skipped
from trainer.runtime.runlog import RunLog

RATE = "lr"  # a history record's learning rate
THROUGHPUT = "tokens_per_s"  # an LM stage's record: the epoch's training tokens a second (every rank's)
LM_STAGES = ("base_lm", "lm_finetune")


def learning_rate(learn) -> float:
    """The rate the epoch's last batch trained with: the head's (the last parameter group), as ULMFiT's
    discriminative rates divide it down the layers and the one-cycle schedule moves it batch by batch."""
    return float(learn.opt.hypers[-1]["lr"])


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
        shown = "  ".join(f"{k} {v:.4f}" for k, v in record.items() if isinstance(v, float))
        # the rate the epoch ended at, a figure of the record: MLflow's mirror charts it beside TensorBoard
        record[RATE] = learning_rate(self.learn)
        self.history.append(record)
        self.log.line(f"{self.stage} [{self.phase}] epoch {record['epoch']}/{self.total}  {shown}")


class ThroughputCallback(Callback):
    """An LM stage's training tokens a second, in the epoch's record (`tokens_per_s`): a figure both views of
    the run show (TensorBoard, MLflow's mirror of metrics.json), timed from the end of the epoch's first batch
    (its set-up is not throughput) to the epoch's end, validation included."""

    run_after = EpochLogCallback  # the epoch's record is in `history`
    run_before = "StatusCallback"  # in the record before anything saves it

    def __init__(self, history: list[dict], *, world: int = 1, clock=time.monotonic):
        self.history, self.world, self.clock = history, world, clock
        self.seen = len(history)

    def begin_phase(self, phase: Phase) -> None:
        """Nothing to keep: each record names its stage."""

    def before_train(self):
        self.tokens, self.started = 0, None

    def after_batch(self):
        # self.learn's attributes read directly: a callback's own lookup falls back to the learner's (microseconds)
        if not self.learn.training or len(self.learn.yb) == 0:  # validation, or a batch ResumeCallback skipped
            return
        if self.started is None:
            self.started = self.clock()
            return
        self.tokens += self.learn.xb[0].numel() * self.world

    def after_epoch(self):
        if skipped(self.learn, self.epoch) or len(self.history) <= self.seen:
            return
        self.seen = len(self.history)
        record = self.history[-1]
        if record["stage"].startswith(LM_STAGES) and self.started is not None and self.tokens:
            record[THROUGHPUT] = round(self.tokens / max(self.clock() - self.started, 1e-9), 1)


class StatusCallback(Callback):
    """Writes stage, epoch and the epoch's figures to status.json after every epoch so followers see progress (rank
    0)."""

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
        self.log.update(
            epoch=self.offset + self.epoch + 1,
            last_epoch={k: v for k, v in last.items() if k not in ("stage", "phase", "epoch", RATE, THROUGHPUT)}
            or None,
        )


# A validation batch (forward only) before one has been timed in the stage, as a share of a training
# batch's time: the slower head's on the dev VM (full softmax 0.38, adaptive 0.77: its accuracy ranks clusters).
VALID_SHARE = 0.8


class BatchProgressCallback(Callback):
    """Inside an epoch: batch, tokens/s and ETAs (validation included) in log.txt and status.json every `every_s` s
    (rank 0)."""

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
        learn = self.learn  # read directly: a callback's own lookup falls back to the learner's (microseconds)
        if not learn.training or len(learn.yb) == 0:  # validation, or a batch ResumeCallback skipped
            return
        now = self.clock()
        if self.started is None:
            self.started = self.last = now
            return  # its duration is unknown: the rates count from the end of this batch
        self.batches += 1
        # every rank reads a batch of this shape (LM batches are bs x seq_len; padded classifier ones may differ)
        self.tokens += learn.xb[0].numel() * self.world
        if now - self.last < self.every_s or learn.iter + 1 >= learn.n_iter:
            return
        self.last, self.shown = now, True
        per_batch = (now - self.started) / self.batches
        epoch = self.offset + self.epoch + 1
        # each epoch ends with a pass over the validation rows (a pretrain's held-out lines: 10-20 % of a 1M-token
        # epoch here)
        valid = len(self.dls.valid) * (self.valid_per_batch or VALID_SHARE * per_batch)
        eta_epoch = (self.n_iter - self.iter - 1) * per_batch + valid
        eta_stage = eta_epoch + (self.total - epoch) * (self.n_iter * per_batch + valid)
        rate = self.tokens / max(now - self.started, 1e-9)
        self.log.line(
            f"{self.stage} epoch {epoch}/{self.total}: batch {self.iter + 1:,}/{self.n_iter:,} "
            f"({100 * (self.iter + 1) / self.n_iter:.0f}%), {rate:,.0f} tokens/s, epoch ETA "
            f"{duration(eta_epoch)}" + (f", stage ETA {duration(eta_stage)}" if eta_stage > eta_epoch else "")
        )
        self.log.update(
            progress={
                "epoch": epoch,
                "batch": self.iter + 1,
                "batches": self.n_iter,
                "tokens_per_s": round(rate),
                "eta_s": round(eta_epoch),
                "stage_eta_s": round(eta_stage),
            }
        )

    def _clear(self):
        if self.shown:  # progress is read as "inside an epoch": stale once the epoch or the fit ends
            self.log.update(progress=None)
            self.shown = False

    def after_train(self):
        self._clear()

    def after_fit(self):
        self._clear()  # a SIGTERM cancels the fit mid-epoch: after_train never runs
