"""Trainer extras as fastai callbacks (run in `order`, lowest first)."""
from __future__ import annotations

import json
import math
import signal
from pathlib import Path

from fastai.callback.core import Callback, CancelFitException

from trainer.runlog import RunLog


class PreemptionCallback(Callback):
    """Turns SIGTERM (Spot notice, destroy) into a clean stop after the current batch."""

    order = 0

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, _frame):
        self.requested = True

    def after_batch(self):
        if self.requested:
            raise CancelFitException()


class EpochLogCallback(Callback):
    """One plain log line per epoch (no carriage-return bars) and the run history."""

    order = 60  # after Recorder has written the epoch's values

    def __init__(self, log: RunLog, history: list[dict]):
        self.log, self.history = log, history
        self.stage, self.phase, self.offset, self.total = "", "", 0, 0

    def after_epoch(self):
        names = [n for n in self.recorder.metric_names[1:] if n != "time"]
        values = self.recorder.log[1:1 + len(names)]
        record = {"stage": self.stage, "phase": self.phase, "epoch": self.offset + self.epoch + 1}
        for name, value in zip(names, values):
            record[name] = None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 5)
        self.history.append(record)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in record.items() if isinstance(v, float))
        self.log.line(f"{self.stage} [{self.phase}] epoch {record['epoch']}/{self.total}  {shown}")


class StatusCallback(Callback):
    """Writes stage/epoch to status.json after every epoch so followers see progress."""

    order = 61

    def __init__(self, log: RunLog):
        self.log = log
        self.offset = 0

    def after_epoch(self):
        self.log.update(epoch=self.offset + self.epoch + 1)


class CheckpointCallback(Callback):
    """Saves weights + optimizer after every epoch and uploads them with their position."""

    order = 62

    def __init__(self, upload, work: Path):
        self.upload, self.work = upload, work
        self.stage, self.phase_idx = "", 0

    def _save(self, epochs_done: int, partial: bool) -> None:
        path = self.learn.save(self.work / f"ckpt-{self.stage}", with_opt=True)
        meta = {"stage": self.stage, "phase": self.phase_idx, "epochs_done": epochs_done, "partial": partial}
        self.upload(Path(path), f"checkpoints/{self.stage}.pth")
        self.upload(json.dumps(meta).encode(), f"checkpoints/{self.stage}.json")

    def after_epoch(self):
        self._save(self.epoch + 1, partial=False)

    def after_cancel_fit(self):
        # Preempted mid-epoch: keep the partial weights; resume restarts this epoch from them.
        self._save(self.epoch, partial=True)
