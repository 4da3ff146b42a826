"""The project's own preemption history per zone: every run's metadata/placements.json (stacks.runs.failover's
RunJournal) of one language over the last `zone_history_days`, read back into figures per zone and machine:
VM hours observed, preemptions, preemptions per VM hour, placements that ended for lack of capacity or quota.

Cheap on a bucket of many runs: one listing of the language's run folders (run ids start with their start time,
so runs older than the window are never read), then each run's two small metadata files, read side by side. A
file that is missing or broken is skipped and counted, never an error: history only orders zones.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from stacks.runs.failover import counts_as_preemption
from trainer.runfiles.keys import PLACEMENTS_META, TRAINCTL_META, run_key
from trainer.runfiles.run_ids import run_started_at
from trainer.runfiles.timestamps import parse_time

READERS = 16  # metadata files read at once (a cloud bucket's latency, not its bandwidth, is the cost)
LONGEST_RUN = timedelta(days=7)  # max_run_hours' bound: a run started this long before the window may still count
CAPACITY_OUTCOMES = ("no capacity", "no quota")
MIN_HOURS = 1 / 60  # a preemption within a VM's first minute still counts as a rate, not a division by zero


@dataclass
class ZoneStats:
    """One zone's (and machine's, where the run's metadata recorded it) figures over the window."""

    zone: str
    machine: str | None = None
    runs: set = field(default_factory=set)  # run ids that were placed there
    vm_hours: float = 0.0
    preemptions: int = 0
    capacity_failures: int = 0

    @property
    def per_hour(self) -> float:
        """Preemptions per VM hour observed (0 without a preemption)."""
        return self.preemptions / max(self.vm_hours, MIN_HOURS) if self.preemptions else 0.0

    def add(self, other: "ZoneStats") -> None:
        self.runs |= other.runs
        self.vm_hours += other.vm_hours
        self.preemptions += other.preemptions
        self.capacity_failures += other.capacity_failures


@dataclass
class ZoneHistory:
    """What the language's runs of the window say, per (zone, machine); `skipped` counts unreadable records."""

    lang: str
    days: int
    stats: dict[tuple[str, str | None], ZoneStats] = field(default_factory=dict)
    runs_read: int = 0
    missing: int = 0  # runs of the window without a placements.json (never placed, or from before failover)
    broken: int = 0  # placements.json that did not parse, or not in the journal's shape
    unreadable: str = ""  # why the runs could not be listed (no history then)

    def of_zone(self, zone: str, machine: str | None = None) -> ZoneStats:
        """The zone's figures for `machine` (runs that recorded none count for every machine)."""
        out = ZoneStats(zone, machine)
        for (z, m), stats in self.stats.items():
            if z == zone and (machine is None or m in (None, machine)):
                out.add(stats)
        return out

    def add_run(self, run_id: str, journal: dict, machine: str | None, since: datetime, now: datetime) -> None:
        placements, preemptions = journal.get("placements"), journal.get("preemptions", [])
        if not isinstance(placements, list) or not isinstance(preemptions, list):
            raise ValueError("not a placements journal")
        last_seen = _last_seen(journal) or now
        for placement in placements:
            zone, applied = placement.get("zone"), _time(placement.get("applied_at"))
            if not zone or applied is None or applied < since:
                continue
            stats = self._stats(zone, machine)
            stats.runs.add(run_id)
            if placement.get("outcome") in CAPACITY_OUTCOMES:
                stats.capacity_failures += 1
            # Spot hours only: a flex-start or on-demand VM is not preempted, and would make its zone look safe
            if (
                placement.get("ran")
                and placement.get("rung", "spot" if placement.get("spot", True) else "on_demand") == "spot"
            ):
                ended = _time(placement.get("ended_at")) or last_seen
                stats.vm_hours += max((ended - applied).total_seconds(), 0.0) / 3600
        for preemption in preemptions:
            if isinstance(preemption, dict) and not counts_as_preemption(preemption):
                continue  # a crashed peer: not the zone's doing
            zone, at = preemption.get("zone"), _time(preemption.get("detected_at"))
            if zone and at is not None and at >= since:
                self._stats(zone, machine).preemptions += 1

    def _stats(self, zone: str, machine: str | None) -> ZoneStats:
        return self.stats.setdefault((zone, machine), ZoneStats(zone, machine))


def read_history(bucket, lang: str, days: int, now: datetime | None = None) -> ZoneHistory:
    """The language's placements of the last `days` days (0: none read)."""
    now = now or datetime.now(timezone.utc)
    history = ZoneHistory(lang, days)
    if days <= 0:
        return history
    since = now - timedelta(days=days)
    if bucket is None:
        history.unreadable = "not opened"
        return history
    try:
        run_ids = bucket.folders(f"{lang}/runs/")
    except Exception as exc:  # no listing, no history: the configured order stands
        history.unreadable = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        return history
    oldest = (since - LONGEST_RUN).timestamp()
    run_ids = [r for r in run_ids if (run_started_at(r) or now.timestamp()) >= oldest]
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        records = list(pool.map(lambda run_id: _read_run(bucket, lang, run_id), run_ids))
    for run_id, (journal, machine) in zip(run_ids, records):
        if journal is None:
            history.missing += 1
            continue
        try:
            history.add_run(run_id, journal, machine, since, now)
        except (ValueError, TypeError, AttributeError):
            history.broken += 1
            continue
        history.runs_read += 1
    return history


def _read_run(bucket, lang: str, run_id: str) -> tuple[dict | None, str | None]:
    """(the run's journal or {} when broken, None when missing; the machine its trainctl.json recorded)."""
    try:
        raw = bucket.read_bytes(run_key(lang, run_id, PLACEMENTS_META))
    except Exception:
        return None, None
    try:
        journal = json.loads(raw)
    except ValueError:
        journal = {"placements": "broken"}  # counted as broken by add_run
    if not isinstance(journal, dict):
        journal = {"placements": "broken"}
    try:
        machine = json.loads(bucket.read_bytes(run_key(lang, run_id, TRAINCTL_META))).get("machine_type")
    except Exception:  # local runs record none; an older run may have no record
        machine = None
    return journal, machine if isinstance(machine, str) else None


def _time(value) -> datetime | None:
    return parse_time(value) if isinstance(value, str) else None


def _last_seen(journal: dict) -> datetime | None:
    """The latest instant the journal recorded: where a placement that never got its end is taken to end."""
    stamps = [
        _time(record.get(key))
        for record in [*journal.get("placements", []), *journal.get("preemptions", [])]
        if isinstance(record, dict)
        for key in ("applied_at", "ended_at", "detected_at", "training_again_at")
    ]
    stamps = [s for s in stamps if s is not None]
    return max(stamps) if stamps else None
