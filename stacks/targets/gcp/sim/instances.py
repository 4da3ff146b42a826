"""What the simulated Compute Engine's resources are made of, shared by its state (cloud.py) and its rules
(flex_start.py): a VM instance, an API refusal, Compute Engine's timestamps."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from stacks.targets.gcp.sim.quotas import VmShape


class SimError(Exception):
    """A request the API refuses: HTTP status, Google's reason and message."""

    def __init__(self, status: int, message: str, reason: str = "notFound"):
        super().__init__(message)
        self.status, self.message, self.reason = status, message, reason


@dataclass
class Instance:
    name: str
    zone: str
    shape: VmShape
    id: int
    status: str = ""  # "" while the group has not created it (yet)
    action: str = "CREATING"
    since_s: float = 0.0  # simulated time of the last change of status
    preempted: bool = False


def stamp(at: float | None = None) -> str:
    """Compute Engine's timestamp form (RFC 3339 with milliseconds and an offset) of `at` (epoch seconds; the
    simulated instant for what happens in the simulation), else now."""
    when = datetime.now(timezone.utc) if at is None else datetime.fromtimestamp(at, timezone.utc)
    return when.isoformat(timespec="milliseconds")
