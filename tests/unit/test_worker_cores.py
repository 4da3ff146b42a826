"""Each pytest-xdist worker of `make test` runs on a core of its own (tests/support/cores.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.project import REPO

SHOW_PIN = (
    "import os; from tests.support.cores import pin_this_worker; "
    "core = pin_this_worker(); print(core, sorted(os.sched_getaffinity(0)))"
)


def pinned(worker: str | None, cores: set[int]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    if worker is not None:
        env["PYTEST_XDIST_WORKER"] = worker
    done = subprocess.run(
        [sys.executable, "-c", SHOW_PIN],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
    )
    return done.stdout.strip()


def test_workers_get_a_core_each_and_a_single_process_is_left_alone():
    # The machine's cores, not this process's mask: under `make test` this worker is itself pinned to one.
    cores = list(range(os.cpu_count() or 1))
    if len(cores) < 2:
        pytest.skip("needs a machine with two cores to pin two workers apart")
    two = {cores[0], cores[1]}
    assert pinned("gw0", two) == f"{cores[0]} [{cores[0]}]"
    assert pinned("gw1", two) == f"{cores[1]} [{cores[1]}]"
    assert pinned("gw2", two) == f"{cores[0]} [{cores[0]}]"
    assert pinned(None, two) == f"None {sorted(two)}"
    assert pinned("gw1", {cores[1]}) == f"None [{cores[1]}]"  # one core: nothing to share out
