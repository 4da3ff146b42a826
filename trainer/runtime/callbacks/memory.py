"""Bounded memory: freed heap pages go back to the OS during training."""

from __future__ import annotations

from fastai.callback.core import Callback

from trainer.runtime import heap
from trainer.runtime.callbacks.progress import BatchProgressCallback


class HeapTrimCallback(Callback):
    """Returns freed heap pages to the OS when the process has grown by `grown_mb` beyond its working set, looked at
    every `every` training batches, so memory stays bounded (see trainer.runtime.heap). A trim walks the whole heap
    (milliseconds) and the pages it returns are faulted in again by the next batches: the working set is what the
    process holds at the first look after a trim (or a fit's start), and only growth beyond it trims again (measured
    from the trim itself, the batches' own pages faulted back in read as growth: a trim every 20 batches of a small
    LM, 0.5 ms a batch, for nothing)."""

    run_after = BatchProgressCallback  # last: nothing after it in the batch allocates

    def __init__(self, every: int = 20, grown_mb: float = 64):
        self.every, self.grown_mb = every, grown_mb
        self.working_mb = 0.0  # resident size of the working set: at the first look after the last trim
        self.settling = True  # the next look measures the working set

    def before_fit(self):
        self.settling = True  # the fit's first batches make its working set

    def after_batch(self):
        learn = self.learn  # read directly: a callback's own lookup falls back to the learner's (microseconds)
        if not learn.training or (learn.iter + 1) % self.every:
            return
        resident = heap.resident_mb()
        if self.settling:
            self.working_mb, self.settling = resident, False
        elif resident - self.working_mb >= self.grown_mb:
            self._trim()

    def after_epoch(self):
        self._trim()  # validation's activations too

    def _trim(self):
        heap.trim()
        self.working_mb, self.settling = heap.resident_mb(), True
