"""TensorBoard curves: each epoch's figures as its record has them (its learning rate and, in LM stages,
tokens/s included); named and stepped as MLflow's mirror names them (trainer/runfiles/curves.py)."""

from __future__ import annotations

from fastai.callback.core import Callback

from trainer.runfiles.curves import curve_key, epoch_figures
from trainer.runtime.callbacks.core import skipped
from trainer.runtime.callbacks.progress import ThroughputCallback, learning_rate


class BoardCallback(Callback):
    """Writes the epoch's points (trainer.runtime.board) after its log line; rank 0 (`board` None
    elsewhere)."""

    run_after = ThroughputCallback  # the epoch's record is in `history`, its throughput too

    def __init__(self, board, history: list[dict]):
        self.board, self.history = board, history
        self.seen = len(history)

    def begin_phase(self, phase) -> None:
        """Nothing to keep: each record names its stage and epoch."""

    def after_epoch(self):
        if self.board is None or skipped(self.learn, self.epoch) or len(self.history) <= self.seen:
            return
        self.seen = len(self.history)
        record = self.history[-1]
        step, stage = len(self.history), record["stage"]  # the global epoch: the record's place in history
        points = epoch_figures(record)
        points.setdefault(curve_key(stage, "lr"), learning_rate(self.learn))  # a record from before it kept its rate
        for key, value in points.items():
            self.board.scalar(key, value, step)
        self.board.sync()  # at most every few seconds; the run's end closes the board with a last sync
