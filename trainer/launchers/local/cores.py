"""The CPU cores of this machine, shared among the local runs one project launched.

Each local trainer is pinned to cores of its own (sched_setaffinity on the trainer process: torch's
intra-op threads, OpenMP and the tokenizer workers all size themselves from the affinity mask).
Two trainers with default threads on 2 cores slowed one of them about tenfold, so a run that
finds fewer free cores than it asked for waits in the queue, saying who holds them, instead of
sharing them. Claims are files in one folder, taken under a lock; a claim whose process is gone
is free again. Stdlib only: the supervisor imports it before anything heavy.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = ".lock"


def machine_cores() -> list[int]:
    """The cores this process may run on (a container's cpuset, not the host's count)."""
    return sorted(os.sched_getaffinity(0))


def share(parallel: int, total: int | None = None) -> int:
    """Cores for each of `parallel` runs side by side (at least one)."""
    total = len(machine_cores()) if total is None else total
    return max(1, total // max(1, parallel))


def describe(cores: list[int]) -> str:
    """0-3 or 0,2: the way taskset writes a core list."""
    if cores and cores == list(range(cores[0], cores[-1] + 1)) and len(cores) > 1:
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


@dataclass(frozen=True)
class Claim:
    run_id: str
    label: str  # what a queued run says it waits for: "fr run 20261125-…"
    pid: int
    cores: tuple[int, ...]
    started: str | None = None  # the process's start time (/proc/<pid>/stat): a reused pid is not the holder


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]  # field 22, starttime
    except (OSError, IndexError):
        return None


def _alive(claim: Claim) -> bool:
    try:
        os.kill(claim.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return claim.started is None or _start_time(claim.pid) in (None, claim.started)


class CoreLedger:
    """Who holds which cores; `claim` hands out free cores or None (wait and ask again)."""

    def __init__(self, directory: Path, cores: list[int] | None = None):
        self.directory = Path(directory)
        self.cores = machine_cores() if cores is None else sorted(cores)

    @contextmanager
    def _locked(self):
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / LOCK_FILE, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _read(self) -> list[Claim]:
        claims = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                claim = Claim(
                    data["run_id"],
                    data.get("label", data["run_id"]),
                    int(data["pid"]),
                    tuple(data["cores"]),
                    data.get("started"),
                )
            except (OSError, ValueError, KeyError, TypeError):
                continue  # half-written by a process that died: not a claim
            if _alive(claim):
                claims.append(claim)
            else:
                path.unlink(missing_ok=True)
        return claims

    def holders(self) -> list[Claim]:
        """The live claims, oldest run first."""
        with self._locked():
            return self._read()

    def want(self, cores: int) -> int:
        """What a request of `cores` (0: all) amounts to on this machine."""
        return len(self.cores) if cores <= 0 else min(cores, len(self.cores))

    def claim(self, run_id: str, cores: int, *, pid: int, label: str = "") -> list[int] | None:
        """`cores` free cores (0: all of them) for `run_id`, or None while others hold too many."""
        need = self.want(cores)
        with self._locked():
            claims = self._read()
            mine = [c for c in claims if c.run_id == run_id]
            if mine:
                return list(mine[0].cores)
            taken = {core for c in claims for core in c.cores}
            free = [core for core in self.cores if core not in taken]
            if len(free) < need:
                return None
            chosen = free[:need]
            path = self.directory / f"{run_id}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(
                json.dumps(
                    {
                        "run_id": run_id,
                        "label": label or run_id,
                        "pid": pid,
                        "cores": chosen,
                        "started": _start_time(pid),
                    }
                )
            )
            tmp.replace(path)
            return chosen

    def release(self, run_id: str) -> None:
        with self._locked():
            (self.directory / f"{run_id}.json").unlink(missing_ok=True)
