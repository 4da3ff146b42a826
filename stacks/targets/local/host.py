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
