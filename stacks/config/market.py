"""The local Spot market's settings (`spot_market:` of an env): simulated zones, outages and preemptions; the one
market model the local target and the simulated Google Cloud share (trainer/launchers/market.py)."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from stacks.config.strict import StrictModel


class SimOutage(StrictModel):
    """A window of a simulated zone without Spot capacity, in market seconds since the run started."""

    start_s: float = Field(0, ge=0, allow_inf_nan=False, description="when the zone runs dry")
    end_s: float | None = Field(None, gt=0, allow_inf_nan=False, description="when capacity is back (unset: never)")

    @model_validator(mode="after")
    def _ends_after_it_starts(self) -> "SimOutage":
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(
                f"an outage from {self.start_s:g} s to {self.end_s:g} s ends before it starts "
                "(end_s after start_s, or unset: for good)"
            )
        return self


class SimZone(StrictModel):
    outages: list[SimOutage] = Field([], description="windows without Spot capacity")
    flex_start_wait_s: float | None = Field(
        0,
        ge=0,
        allow_inf_nan=False,
        description="market seconds a flex-start request waits here before all its nodes come (unset: never)",
    )


class SimPreemption(StrictModel):
    """A preemption of the VM in `zone`: at a market time, or when that VM trains `epoch` of `stage`."""

    zone: str
    at_s: float | None = Field(None, ge=0, allow_inf_nan=False, description="market seconds since the run started")
    stage: str | None = Field(None, description="or: once the VM there trains this stage ...")
    epoch: int = Field(1, ge=0, description="... at this epoch or later")
    outage_s: float | None = Field(
        0, ge=0, allow_inf_nan=False, description="the zone is dry this long after it (unset: for good)"
    )
    batch: int = Field(
        0,
        ge=0,
        description="with stage: this many batches into the next epoch instead (read from its progress lines: "
        "trainer.progress_seconds 0)",
    )

    @model_validator(mode="after")
    def _one_trigger(self) -> "SimPreemption":
        from trainer.runfiles.status_file import RUN_STAGES

        if (self.at_s is None) == (self.stage is None):
            raise ValueError(f"a preemption of {self.zone} needs at_s or stage (one of them)")
        if self.stage is not None and self.stage not in RUN_STAGES:
            raise ValueError(
                f"a preemption of {self.zone} waits for stage {self.stage!r}, which no run has "
                f"(stages: {', '.join(RUN_STAGES)})"
            )
        return self


class SpotMarketSettings(StrictModel):
    """local target: a simulated Spot market (trainer/launchers/market.py), its zones tried in this order."""

    speedup: float = Field(1, gt=0, allow_inf_nan=False, description="market seconds per wall-clock second")
    zones: dict[str, SimZone] = Field(min_length=1, description="simulated zones, in order of preference")
    preemptions: list[SimPreemption] = Field([], description="when VMs are taken back")
    notice_s: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="wall seconds from a preemption's SIGTERM to SIGKILL (unset: 25, the launcher's grace; "
        "0: no notice, killed at once)",
    )

    @model_validator(mode="after")
    def _known_zones(self) -> "SpotMarketSettings":
        for zone in self.zones:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", zone):
                raise ValueError(f"zone {zone!r} is not a zone name (letters, digits, - and _)")
        unknown = sorted({p.zone for p in self.preemptions} - set(self.zones))
        if unknown:
            raise ValueError(
                f"preemptions name zones the market lacks: {', '.join(unknown)} (zones: {', '.join(self.zones)})"
            )
        return self

    def to_json(self, rung: str = "spot") -> str:
        """What the local launcher reads (trainer.launchers.market.Market.from_json), for a VM asking for `rung`."""
        import json

        return json.dumps(
            {
                "speedup": self.speedup,
                "zones": {z: [[o.start_s, o.end_s] for o in zone.outages] for z, zone in self.zones.items()},
                "preemptions": [p.model_dump() for p in self.preemptions],
                "flex_start": {z: zone.flex_start_wait_s for z, zone in self.zones.items()},
                "rung": rung,
                **({"notice_s": self.notice_s} if self.notice_s is not None else {}),
            },
            separators=(",", ":"),
        )
