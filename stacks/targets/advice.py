"""What a cloud says of its zones' Spot capacity before a run is placed (gcp: Compute Engine's capacity advice and
capacity history), in one shape every target answers (`Target.capacity_advice`): the ranking of zones
(stacks.runs.zone_ranking) reads it beside the project's own preemption history."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ZoneAdvice:
    """One zone's figures; None where the cloud gave none."""

    zone: str
    obtainability: float | None = None  # 0..1: the chance of getting the run's VMs there now
    estimated_uptime_s: float | None = None  # how long most Spot VMs there run before a preemption
    preemption_rate: float | None = None  # mean daily share of Spot VMs preempted over the history (0..1)
    spot_price: float | None = None  # the latest Spot price of the machine there, USD per hour

    def words(self) -> str:
        parts = []
        if self.obtainability is not None:
            parts.append(f"obtainability {self.obtainability:.2f}")
        if self.estimated_uptime_s is not None:
            parts.append(f"uptime ~{self.estimated_uptime_s / 3600:.1f}h")
        if self.preemption_rate is not None:
            parts.append(f"daily preemption rate {self.preemption_rate:.0%}")
        if self.spot_price is not None:
            parts.append(f"spot ${self.spot_price:.2f}/h")
        return ", ".join(parts) or "no figures"


@dataclass(frozen=True)
class CapacityAdvice:
    """The cloud's figures per zone, and why some or all are missing (`note`: "no advice (403: ...)", once)."""

    by_zone: dict[str, ZoneAdvice] = field(default_factory=dict)
    note: str = ""


NO_ADVICE = CapacityAdvice(note="no advice: the target has none")
