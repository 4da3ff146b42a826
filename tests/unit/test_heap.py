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


def fragment(mb: int):
    """As above: `mb` freed 1 MB blocks stay resident below a live one (returned: keep it alive)."""
    np.ones(20 * 2**20, dtype=np.uint8)
    blocks = [np.ones(2**20, dtype=np.uint8) for _ in range(mb)]
    top = np.ones(2**20, dtype=np.uint8)
    del blocks
    return top


@glibc
def test_the_callback_trims_once_the_process_has_grown_beyond_its_working_set(monkeypatch):
    trimmed = []
    real_trim = heap.trim
    monkeypatch.setattr(heap, "trim", lambda: trimmed.append(resident_mb()) or real_trim())
    trims = HeapTrimCallback(every=1, grown_mb=48)
    trims.learn = SimpleNamespace(training=True, iter=0)
    trims.before_fit()
    tops = [fragment(120)]  # the fit's first batches: its working set, not growth
    trims.after_batch()
    trims.after_batch()
    assert trimmed == []  # nothing grew beyond the working set: no trim (a walk of the whole heap)
    tops.append(fragment(240))  # more than the heap holds free
    grown = resident_mb()
    assert grown - trims.working_mb > 48, (trims.working_mb, grown)
    trims.after_batch()
    assert len(trimmed) == 1 and trims.working_mb < grown - 80, (grown, trims.working_mb)
    # the next batches fault their pages back in: the working set again, not growth
    tops.append(fragment(100))
    trims.after_batch()
    trims.after_batch()
    assert len(trimmed) == 1
    tops.append(fragment(400))  # growth beyond it (more than the heap holds) trims again
    trims.after_batch()
    assert len(trimmed) == 2


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
