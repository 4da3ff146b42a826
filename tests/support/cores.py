"""A core for each pytest-xdist worker.

`make test` runs two workers per core. Each worker (and every trainer, terraform and node process it starts)
is pinned to one core, gw0 and gw2 to the first, gw1 and gw3 to the second: the trainers size their threads
from the affinity mask, and two torch jobs spread over two cores thrash. A pinned worker is a busy one-core
machine, where the suite must pass anyway."""

from __future__ import annotations

import os


def worker_index() -> int | None:
    """0 for pytest-xdist's gw0, 1 for gw1 …; None outside a worker."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def pin_this_worker() -> int | None:
    """Pins every thread of this process to the worker's core; returns the core (None: not pinned)."""
    index = worker_index()
    cores = sorted(os.sched_getaffinity(0))
    if index is None or len(cores) < 2:
        return None
    core = cores[index % len(cores)]
    for tid in os.listdir("/proc/self/task"):  # threads started before this call keep their mask otherwise
        try:
            os.sched_setaffinity(int(tid), {core})
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    return core
