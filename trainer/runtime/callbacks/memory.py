"""Bounded memory: freed heap pages go back to the OS during training."""

from __future__ import annotations

from fastai.callback.core import Callback

from trainer.runtime import heap
from trainer.runtime.callbacks.progress import BatchProgressCallback


class HeapTrimCallback(Callback):
    """Returns freed heap pages to the OS when the process has grown by `grown_mb` since the last trim, looked at
    every `every` training batches, so memory stays bounded (see trainer.runtime.heap). A trim walks the whole
    heap (milliseconds) and the pages it returns are faulted in again: a process that is not growing skips it."""

    run_after = BatchProgressCallback  # last: nothing after it in the batch allocates

    def __init__(self, every: int = 20, grown_mb: float = 64):
        self.every, self.grown_mb = every, grown_mb
        self.trimmed_at_mb = 0.0  # resident size after the last trim

    def before_fit(self):
        self.trimmed_at_mb = heap.resident_mb()

    def after_batch(self):
        learn = self.learn  # read directly: a callback's own lookup falls back to the learner's (microseconds)
        if (
            learn.training
            and (learn.iter + 1) % self.every == 0
            and heap.resident_mb() - self.trimmed_at_mb >= self.grown_mb
        ):
            self._trim()

    def after_epoch(self):
        self._trim()  # validation's activations too

    def _trim(self):
        heap.trim()
        self.trimmed_at_mb = heap.resident_mb()
