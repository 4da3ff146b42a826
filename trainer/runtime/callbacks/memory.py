"""Bounded memory: freed heap pages go back to the OS during training."""

from __future__ import annotations

from fastai.callback.core import Callback

from trainer.runtime import heap
from trainer.runtime.callbacks.progress import BatchProgressCallback


class HeapTrimCallback(Callback):
    """Returns freed heap pages to the OS every `every` training batches, so memory stays bounded (see
    trainer.runtime.heap)."""

    run_after = BatchProgressCallback  # last: nothing after it in the batch allocates

    def __init__(self, every: int = 20):
        self.every = every

    def after_batch(self):
        if self.training and (self.iter + 1) % self.every == 0:
            heap.trim()

    def after_epoch(self):
        heap.trim()  # validation's activations too
