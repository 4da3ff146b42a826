"""Giving freed heap memory back to the operating system (glibc only; a no-op elsewhere).

Training allocates activations of many sizes every batch. glibc's malloc raises its mmap
threshold each time a large block is freed, so later blocks of that size come from the heap,
whose free pages it keeps: an LM pretrain's resident memory grew ~4 MB per batch (1.0 to 2.0 GB
in 250 batches, to 5+ GB in an epoch) while nothing was live. `malloc_trim(0)` releases those
free pages; measured in docs/BENCHMARKS.md ("Memory").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache


@cache
def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to do
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim() -> bool:
    """Return the heap's free pages to the OS; True if any were released."""
    fn = _malloc_trim()
    return bool(fn(0)) if fn is not None else False


def resident_mb() -> float:
    """This process's resident memory in MiB (Linux's /proc/self/statm; 0 elsewhere, where nothing is trimmed)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0
