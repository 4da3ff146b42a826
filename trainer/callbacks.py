"""Trainer extras as fastai callbacks (run in `order`, lowest first)."""
from __future__ import annotations

import json
import math
import signal
from pathlib import Path

from fastai.callback.core import Callback, CancelFitException

from trainer.runlog import RunLog


def skipped(learn, epoch: int) -> bool:
    """fastai still fires after_epoch for epochs that fit(start_epoch=…) skips on resume."""
    skip = next((cb for cb in learn.cbs if type(cb).__name__ == "SkipToEpoch"), None)
    return skip is not None and epoch < skip._skip_to


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
            record[name] = None if math.isnan(number) else round(number, 5)
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
        if not skipped(self.learn, self.epoch):
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
        self.upload(Path(path), f"checkpoints/{self.stage}.ckpt.pth")
        self.upload(json.dumps(meta).encode(), f"checkpoints/{self.stage}.ckpt.json")

    def after_epoch(self):
        if not skipped(self.learn, self.epoch):
            self._save(self.epoch + 1, partial=False)

    def after_cancel_fit(self):
        # Preempted mid-epoch: keep the partial weights; resume restarts this epoch from them.
        self._save(self.epoch, partial=True)
