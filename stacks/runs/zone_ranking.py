"""The order a run tries its zones in, by data: (a) the project's own preemptions per VM hour in each zone over the
last `zone_history_days` (stacks.runs.zone_history), (b) the cloud's capacity advice where the target has it
(`Target.capacity_advice`: a higher obtainability, then a lower preemption rate), and (c) a block: the zone that
preempted this run is not used again by it for `zone_block_minutes`. Zones alike on all three keep the env's order,
so a project without history or advice tries its zones exactly as written.

Ranked at the preflight (the zone a run starts in; stacks.runs.stack_ops.open_stack) and whenever the lifecycle
draws its candidates to move a run (stacks.runs.moves.follow_moving); the block is checked at every move
(stacks.runs.failover.Failover.blocked). `trainctl zones LANG` shows the ranking and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from stacks.runs.failover import counts_as_preemption
from stacks.runs.zone_history import ZoneHistory, ZoneStats, read_history
from stacks.targets.advice import CapacityAdvice, ZoneAdvice
from trainer.runfiles.timestamps import parse_time


@dataclass(frozen=True)
class RankedZone:
    zone: str
    tier: int  # the target's tier (gcp: zones, then fallback_zones): a later tier's zone never ranks first
    configured: int  # its place in the env's order
    stats: ZoneStats
    advice: ZoneAdvice | None
    blocked_until: datetime | None

    def key(self) -> tuple:
        advice = self.advice or ZoneAdvice(self.zone)
        return (
            self.tier,
            self.blocked_until is not None,
            round(self.stats.per_hour, 3),
            -(advice.obtainability if advice.obtainability is not None else 0.0),
            round(advice.preemption_rate or 0.0, 3),
            self.configured,
        )

    def history_words(self) -> str:
        s = self.stats
        if not s.runs:
            return "no runs here"
        runs = f"{len(s.runs)} run{'s' if len(s.runs) != 1 else ''}"
        words = f"{s.per_hour:.2f} preemptions/h ({s.preemptions} over {s.vm_hours:.1f} VM h) from {runs}"
        return words + (f", {s.capacity_failures} without capacity" if s.capacity_failures else "")


@dataclass
class ZoneRanking:
    zones: list[RankedZone] = field(default_factory=list)  # best first
    history: ZoneHistory | None = None
    advice: CapacityAdvice = field(default_factory=CapacityAdvice)

    def order(self) -> list[str]:
        return [z.zone for z in self.zones]

    def reordered(self) -> bool:
        """Whether the data changed the env's order."""
        return [z.configured for z in self.zones] != sorted(z.configured for z in self.zones)

    def score(self, zone: str | None) -> tuple:
        """The zone's rank key without the env's order (zones alike score alike); a zone not ranked: last."""
        found = next((z for z in self.zones if z.zone == zone), None)
        return (0, *found.key()[:-1]) if found else (1,)

    def source_line(self) -> str:
        h = self.history
        if h is None or h.days <= 0:
            said = "no history (zone_history_days: 0)"
        elif h.unreadable:
            said = f"no history (the bucket: {h.unreadable})"
        else:
            said = f"history: {h.runs_read} run(s) of the last {h.days} days"
            skipped = [f"{n} {what}" for n, what in ((h.broken, "broken"), (h.missing, "without placements")) if n]
            said += f" ({', '.join(skipped)} skipped)" if skipped else ""
        return f"{said}; advice: {self.advice.note or 'from the cloud'}"

    def lines(self) -> list[str]:
        """One line per zone: rank, zone, history, advice, block."""
        out = []
        for rank, z in enumerate(self.zones, 1):
            advice = z.advice.words() if z.advice else "no advice"
            block = f" · blocked until {z.blocked_until:%H:%M} UTC (preempted this run)" if z.blocked_until else ""
            out.append(f"{rank}. {z.zone}: {z.history_words()} · {advice}{block}")
        return out


def zone_blocks(journal: dict | None, minutes: float, now: datetime | None = None) -> dict[str, datetime]:
    """Zones the run's journal (metadata/placements.json) says preempted it less than `minutes` ago -> until when."""
    now = now or datetime.now(timezone.utc)
    out: dict[str, datetime] = {}
    if not journal or minutes <= 0:
        return out
    for preemption in journal.get("preemptions") or []:
        preempted = isinstance(preemption, dict) and counts_as_preemption(preemption)
        zone = preemption.get("zone") if preempted else None
        at = parse_time(preemption.get("detected_at")) if zone else None
        if at is not None and (until := at + timedelta(minutes=minutes)) > now:
            out[zone] = max(out.get(zone, until), until)
    return out


def block_note(journal: dict | None, minutes: float, zone: str | None, now: datetime | None = None) -> str | None:
    """Why `zone` may not take the run now (it preempted it within zone_block_minutes), else None."""
    until = zone_blocks(journal, minutes, now).get(zone) if zone else None
    if until is None:
        return None
    return f"it preempted this run; blocked until {until:%H:%M} UTC (zone_block_minutes={minutes:g})"


def rank_zones(target, config, lang: str, bucket, *, journal: dict | None = None, now=None) -> ZoneRanking:
    """The target's zones for `lang`, best first; never raises for lack of data (no history, no advice)."""
    tiers = target.zones(config, lang)
    zones = [zone for tier in tiers for zone in tier]
    if not zones:
        return ZoneRanking()
    settings = config.language(lang)
    try:
        machine = (target.run_metadata(config, lang, None, bucket) or {}).get("machine_type")
    except Exception:  # what the machine is only narrows the history
        machine = None
    history = read_history(bucket, lang, settings.zone_history_days, now)
    try:
        advice = target.capacity_advice(config, lang, zones)
    except Exception as exc:  # advice only orders zones: a target's failure is "no advice"
        advice = CapacityAdvice(note=f"no advice: {exc}")
    blocks = zone_blocks(journal, settings.zone_block_minutes, now) if settings.spot else {}
    tier_of = {zone: t for t, tier in enumerate(tiers) for zone in tier}
    ranked = [
        RankedZone(zone, tier_of[zone], i, history.of_zone(zone, machine), advice.by_zone.get(zone), blocks.get(zone))
        for i, zone in enumerate(zones)
    ]
    return ZoneRanking(sorted(ranked, key=RankedZone.key), history, advice)


def ranked_config(target, config, lang: str, bucket, reporter=None, *, journal: dict | None = None):
    """The env with the language's zones in ranked order (the same config when nothing reorders them); says the
    ranking when it differs from the env's order, and why advice is missing, once."""
    ranking = rank_zones(target, config, lang, bucket, journal=journal)
    if reporter is not None and ranking.zones:
        if ranking.reordered():
            reporter.info(f"zones of {lang} ranked by data: {', '.join(ranking.order())} ({ranking.source_line()})")
        elif ranking.advice.note and not ranking.advice.note.startswith("no advice: the target"):
            reporter.info(f"zones of {lang} in the env's order ({ranking.advice.note})")
    return target.with_zone_order(config, lang, ranking.order()) if ranking.reordered() else config


def ranked_placements(placements: list, ranking: ZoneRanking, current) -> tuple[list, int]:
    """`placements` for a move from `current`: as the target listed them, from `current` on (wrapping round), the
    others then stably sorted by the ranking -> (the candidates, the index of `current`). Equal ranks keep today's
    round-robin order."""
    at = next((i for i, p in enumerate(placements) if p == current), None)
    if at is None or not ranking.zones:
        return placements, at or 0
    rotation = placements[at:] + placements[:at]
    others = sorted(rotation[1:], key=lambda p: ranking.score(getattr(p, "zone", None)))
    return [rotation[0], *others], 0
