"""What the local target tells the train stack about this machine (the stack never reads it itself)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LocalHost:
    """What the local target needs to know about this machine (passed in, never read here)."""

    python: str
    workdir: Path
    procs_dir: Path
    state_file: Path
    cores_dir: Path
    zone: str | None = None  # a zone of the simulated Spot market (local.spot_market), or None: no market
    market: str | None = None  # the market as the launcher reads it (SpotMarketSettings.to_json)


@dataclass(frozen=True)
class LocalPlacement:
    """Where a local run's "VM" goes: a zone of the simulated Spot market."""

    zone: str
