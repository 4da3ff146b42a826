"""trainer.runtime.heap: freed heap pages go back to the OS (the LM pretrain's memory growth)."""

import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from trainer.runtime import heap
from trainer.runtime.callbacks import HeapTrimCallback
from trainer.runtime.fitting import Fitter
from trainer.runtime.runlog import QuietLog


def resident_mb() -> float:
    """This process's resident set size in MiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or heap._malloc_trim() is None,
    reason="malloc_trim is glibc's: elsewhere heap.trim() is a no-op by design",
)


@glibc
def test_trim_returns_pages_that_a_fragmented_heap_keeps():
    # Freeing a 20 MB block raises glibc's mmap threshold to 20 MB, so the 1 MB blocks below come
    # from the heap; one live block at its top keeps every freed page below it resident.
    np.ones(20 * 2**20, dtype=np.uint8)
    blocks = [np.ones(2**20, dtype=np.uint8) for _ in range(300)]
    top = np.ones(2**20, dtype=np.uint8)
    del blocks
    before = resident_mb()
    assert heap.trim() is True
    after = resident_mb()
    assert before - after > 150, (before, after)
    del top


@glibc
def test_the_callback_trims_once_the_process_has_grown():
    trims = HeapTrimCallback(every=1, grown_mb=48)
    trims.learn = SimpleNamespace(training=True, iter=0)
    trims.before_fit()
    start = trims.trimmed_at_mb
    trims.after_batch()
    assert trims.trimmed_at_mb == start  # nothing grew: no trim (a walk of the whole heap) this batch
    np.ones(20 * 2**20, dtype=np.uint8)  # as above: freed 1 MB blocks stay resident below a live one
    blocks = [np.ones(2**20, dtype=np.uint8) for _ in range(120)]
    top = np.ones(2**20, dtype=np.uint8)
    del blocks
    grown = resident_mb()
    assert grown - start > 48, (start, grown)
    trims.after_batch()
    assert trims.trimmed_at_mb < grown - 80, (start, grown, trims.trimmed_at_mb)
    del top


def test_every_learner_trims_its_heap(tmp_path):
    class Learner:
        def __init__(self):
            self.cbs = []

        def remove_cb(self, cb):
            pass

        def add_cb(self, cb):
            self.cbs.append(cb)

    args = SimpleNamespace(
        emb_sz=8, n_hid=8, n_layers=1, checkpoint_minutes=0, progress_seconds=60, patience=10, lm_head="full"
    )
    rc = SimpleNamespace(
        a=args,
        ctx=SimpleNamespace(distributed=False, world=1, main=False),
        log=QuietLog(),
        precision="fp32",
        preemption=None,
    )
    learn = Fitter(rc).setup(Learner())
    assert HeapTrimCallback in [type(cb) for cb in learn.cbs]
