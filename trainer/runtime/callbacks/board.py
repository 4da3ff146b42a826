"""TensorBoard curves: each epoch's figures (as its log line has them), its learning rate and, in LM stages,
tokens/s; named and stepped as MLflow's mirror names them (trainer/runfiles/curves.py)."""

from __future__ import annotations

import time

from fastai.callback.core import Callback

from trainer.runfiles.curves import curve_key, epoch_figures
from trainer.runtime.callbacks.core import skipped
from trainer.runtime.callbacks.progress import EpochLogCallback, learning_rate

LM_STAGES = ("base_lm", "lm_finetune")


class BoardCallback(Callback):
    """Writes the epoch's points (trainer.runtime.board) after its log line; rank 0 (`board` None
    elsewhere)."""

    run_after = EpochLogCallback  # the epoch's record is in `history`

    def __init__(self, board, history: list[dict], *, world: int = 1):
        self.board, self.history, self.world = board, history, world
        self.seen = len(history)

    def begin_phase(self, phase) -> None:
        """Nothing to keep: each record names its stage and epoch."""

    def before_train(self):
        self.tokens, self.started = 0, None

    def after_batch(self):
        # self.learn's attributes read directly: a callback's own lookup falls back to the learner's (microseconds)
        if self.board is None or not self.learn.training or len(self.learn.yb) == 0:
            return
        if self.started is None:
            self.started = time.monotonic()  # from the end of the first batch: its set-up is not throughput
            return
        self.tokens += self.learn.xb[0].numel() * self.world

    def after_epoch(self):
        if self.board is None or skipped(self.learn, self.epoch) or len(self.history) <= self.seen:
            return
        self.seen = len(self.history)
        record = self.history[-1]
        step, stage = len(self.history), record["stage"]  # the global epoch: the record's place in history
        points = epoch_figures(record)
        points.setdefault(curve_key(stage, "lr"), learning_rate(self.learn))  # a record from before it kept its rate
        if stage.startswith(LM_STAGES) and self.started is not None and self.tokens:
            seconds = max(time.monotonic() - self.started, 1e-9)
            points[curve_key(stage, "tokens_per_s")] = self.tokens / seconds
        for key, value in points.items():
            self.board.scalar(key, value, step)
        self.board.sync()  # at most every few seconds; the run's end closes the board with a last sync
