"""The capacity ladder of a language's runs: the rungs a run takes in turn when every placement lacks the one before
(stacks.runs.ladder.take_next_rung), part of every target's language settings (`LanguageSettingsBase` derives from
it). A target says which rungs it can serve a language's machine at (its env block's `offered_rungs`): the default
ladder leaves out the others; a ladder written out is checked by the target instead (exit 2, naming the rung)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, model_validator

from stacks.config.strict import StrictModel

Rung = Literal["spot", "flex_start", "on_demand"]
RUNGS: tuple[str, ...] = ("spot", "flex_start", "on_demand")
# The default, from the capacity policy benchmark (docs/BENCHMARKS.md, "Capacity policies"): flex-start once Spot is
# dry everywhere gave the most runs in every market profile, at about the same cost per run.
DEFAULT_LADDER: tuple[str, ...] = ("spot", "flex_start")


class CapacityLadder(StrictModel):
    capacity: list[Rung] | None = Field(
        None,
        min_length=1,
        description="the capacity ladder, tried in order: a run takes the next rung once every placement lacked "
        "the one before (spot: preemptible, resumed from checkpoints; flex_start: queued for all nodes at once, "
        "never preempted, up to flex_start_wait_minutes; on_demand: the list price). Default [spot, flex_start] "
        "(flex_start left out where the machine is not offered it); the older keys still work: spot: false is "
        "[on_demand], on_demand_fallback: true [spot, on_demand]",
    )
    spot: bool = Field(
        True, description="the first rung is Spot (read from capacity; older spelling of capacity: [on_demand])"
    )
    on_demand_fallback: bool = Field(
        False,
        description="on_demand is a later rung of capacity (read from it; older spelling of "
        "capacity: [spot, on_demand])",
    )
    flex_start_wait_minutes: float = Field(
        60,
        gt=0,
        le=10080,
        description="flex_start rung: how long a request for all the run's nodes may wait in one placement's "
        "queue before the run moves to the next placement (after the last, its next rung); an error at that rung (a "
        "quota, a refused request) moves it after creation_error_minutes, as at any rung",
    )
    _default_ladder: bool = PrivateAttr(False)  # no capacity, spot or on_demand_fallback written

    @model_validator(mode="after")
    def _one_capacity_ladder(self) -> "CapacityLadder":
        """`capacity` is the ladder; `spot` and `on_demand_fallback`, its older spelling, are read from it. Alone they
        mean what they meant (spot: false, on demand only; on_demand_fallback: true, Spot then on demand); beside a
        capacity (an overlay's over a newer base's) they edit it."""
        given, written = self.model_fields_set, self.capacity
        legacy_spot = self.spot if "spot" in given else None
        legacy_fallback = self.on_demand_fallback if "on_demand_fallback" in given else None
        if written is not None and legacy_spot == (written[0] == "spot"):
            legacy_spot = None  # what the ladder says already (a dumped config read again): not an edit
        if written is not None and legacy_fallback == ("on_demand" in written[1:]):
            legacy_fallback = None
        if self.capacity is not None:
            ladder = list(self.capacity)
            if len(set(ladder)) != len(ladder):
                raise ValueError(f"capacity {ladder}: a rung is named twice")
        elif legacy_spot is False:
            ladder = ["on_demand"]
        elif legacy_fallback:
            ladder = ["spot", "on_demand"]
        else:
            ladder = list(DEFAULT_LADDER)
            self._default_ladder = True
        if self.capacity is not None:
            if legacy_spot is False:
                ladder = [r for r in ladder if r != "spot"] or ["on_demand"]
            elif legacy_spot and ladder[0] != "spot":
                ladder = ["spot", *(r for r in ladder if r != "spot")]
            if legacy_fallback and "on_demand" not in ladder:
                ladder.append("on_demand")
            elif legacy_fallback is False and len(ladder) > 1:
                ladder = [r for r in ladder if r != "on_demand"]
        self._set_ladder(ladder)
        return self

    def _set_ladder(self, ladder: list[str]) -> None:
        object.__setattr__(self, "capacity", ladder)
        object.__setattr__(self, "spot", ladder[0] == "spot")
        object.__setattr__(self, "on_demand_fallback", "on_demand" in ladder[1:])

    @property
    def rung(self) -> str:
        """The capacity the run asks for now: the ladder's first rung (`on_rung` moves it)."""
        return self.capacity[0]

    def next_rungs(self) -> list[str]:
        return list(self.capacity[1:])

    def on_rung(self, rung: str):
        """These settings at `rung` of the ladder (the rungs before it dropped): what a run that took it runs with."""
        ladder = self.capacity[self.capacity.index(rung) :]
        return self.model_copy(
            update={"capacity": ladder, "spot": rung == "spot", "on_demand_fallback": "on_demand" in ladder[1:]}
        )


def offer_default_ladders(config) -> None:
    """Each language whose ladder is the default loses the rungs the env's target cannot serve its machine at (the
    target's env block `offered_rungs(settings)`; a target without it serves every rung)."""
    block = getattr(config, config.target, None)
    offered = getattr(block, "offered_rungs", None)
    if not callable(offered):
        return
    for settings in (config.defaults, *config.languages.values()):
        if settings._default_ladder:
            served = offered(settings)
            settings._set_ladder([r for r in settings.capacity if r in served] or settings.capacity[:1])
