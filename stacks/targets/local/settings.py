"""`local:` of an env and of a language (`defaults.local`, `languages.<lang>.local`): the simulated Spot market, and
the processes and cores a run takes on this machine. Named by the registry (stacks/config/targets.py)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from stacks.config.market import SpotMarketSettings
from stacks.config.strict import StrictModel


class LocalSettings(StrictModel):
    """the simulated Spot market the env's runs meet on this machine (envs/local-spot.yaml)."""

    spot_market: SpotMarketSettings | None = Field(
        None, description="simulate Spot capacity and preemptions (envs/local-spot.yaml); unset: always capacity"
    )


class LocalLanguageSettings(StrictModel):
    """the trainer's processes and the CPU cores a run takes on this machine."""

    # what a resumed run may change (stacks.runs.resume_check): its cores, never its world size
    SAFE_ON_RESUME: ClassVar[frozenset[str]] = frozenset({"cores"})

    processes: int = Field(1, ge=1, le=64, description="trainer ranks (gloo, CPU) on this machine")
    cores: int = Field(
        0,
        ge=0,
        le=4096,
        description="CPU cores the trainer is pinned to (0: all of "
        "the machine's); a local run finding fewer free cores queues until runs holding them end "
        "(`train --parallel N` sets each run's share)",
    )
