"""How a language's runs choose among their zones (stacks.runs.zone_ranking), part of every target's language
settings (`LanguageSettingsBase` derives from it)."""

from __future__ import annotations

from pydantic import Field

from stacks.config.strict import StrictModel


class ZoneChoiceSettings(StrictModel):
    zone_block_minutes: float = Field(
        60,
        ge=0,
        le=10080,
        description="a zone that preempted a Spot run is not used again by that run for this long: the run "
        "leaves it at once for another open placement, and its moves skip it (it waits there for its group only "
        "where no other placement is open; 0: no block, a preempted run waits where it is)",
    )
    zone_history_days: int = Field(
        30,
        ge=0,
        le=365,
        description="how far back the language's earlier runs' placements (preemptions per VM hour of each zone) "
        "rank the zones a run tries first (`trainctl zones`); 0: no history",
    )
