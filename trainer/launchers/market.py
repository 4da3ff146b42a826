"""A simulated Spot market: named zones with capacity windows and preemptions, which the local target's launcher
meets (envs/local-spot.yaml) and the simulated Google Cloud replays (stacks/targets/gcp/sim/): no target's own.

What only a cloud can do (run out of Spot capacity, take a VM back) happens here to the local launcher,
so the same run lifecycle (stacks/runs/) meets it: the supervisor, like an instance group, creates its
"VM" (starts the trainer) only while its zone has capacity, records a creation error
(ZONE_RESOURCE_POOL_EXHAUSTED) for each try that finds none, and preempts it (SIGTERM to the trainer)
when a scheduled preemption comes due. A flex-start VM (the ladder's flex_start rung) waits in its zone's queue
instead, then comes with all its nodes at once, and is never preempted.

Market time is simulated seconds since the run started (its id's timestamp), `speedup` of them per wall
second. A zone is dry inside any of its `outages` ([start_s, end_s), end None: for good) and for
`outage_s` after a preemption in it fired (the capacity that was taken back). A preemption gives the VM
`notice_s` wall seconds between SIGTERM (the trainer saves at the end of its batch) and SIGKILL; with 0 it is
killed at once, losing what it trained since its last checkpoint. A preemption fires at a
market time (`at_s`) or when the VM in its zone trains an epoch of a stage (`stage`, `epoch`: tests wait for
events, not time; a stage an earlier VM finished does not count), once per run: which fired, and when, is
kept in the run's launcher folder, so a run moved to another zone, or resumed later, sees the same market.
Stdlib only.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

NO_CAPACITY = "ZONE_RESOURCE_POOL_EXHAUSTED"
FLEX_START_QUEUED = "FLEX_START_QUEUED"  # a flex-start request waiting for capacity: not an error, a queue
STAGE_LINE = "== stage "  # the run log's line as a stage starts (trainer.runtime.context)
EPOCH_LINE = re.compile(r"(\S+) \[\d+/\d+\] epoch (\d+)/")  # `classifier [1/2] epoch 1/2  train_loss ...`
PROGRESS_LINE = re.compile(r"(\S+) epoch (\d+)/\d+: batch ([\d,]+)/")  # `lm_finetune epoch 2/3: batch 7/15 (47%), ...`
ERRORS_FILE, FIRED_FILE = "creation_errors.jsonl", "market_fired.json"
POINT_S = 60.0  # how long after its market time a timed preemption still takes a VM it finds in its zone


@dataclass(frozen=True)
class Preemption:
    zone: str
    at_s: float | None = None
    stage: str | None = None
    epoch: int = 1
    outage_s: float | None = 0.0  # None: the zone stays dry for good
    batch: int = 0  # with `stage`: this many batches into the epoch after `epoch` (its progress lines)

    @property
    def key(self) -> str:
        """Stable across invocations: a fired preemption is matched to the config by it."""
        if self.at_s is not None:
            return f"{self.zone}@{self.at_s:g}s"
        return f"{self.zone}@{self.stage}:{self.epoch}" + (f"+{self.batch}" if self.batch else "")

    def due(self, now_s: float, log: list[str] = ()) -> bool:
        """At its market time; or once the run is at `epoch` of `stage` by the lines of its log this VM's trainer
        wrote (append-only: a stage shorter than a poll is never missed; a later stage's start counts as past the
        epoch; with `batch`, at that batch of the next epoch, by its progress lines). Not by status.json: a resumed
        run's status is an earlier VM's until the trainer writes its own."""
        if self.at_s is not None:  # a moment: a VM that comes to the zone later is not taken back
            return self.at_s <= now_s and (self.outage_s is None or now_s < self.at_s + max(self.outage_s, POINT_S))
        in_stage = False
        for line in log:
            text = line.split(" ", 1)[-1]
            if text.startswith(STAGE_LINE):
                name = text[len(STAGE_LINE) :].split(" ", 1)[0]
                if in_stage and name != self.stage:
                    return True
                in_stage = in_stage or name == self.stage
                if in_stage and self.epoch == 0 and not self.batch:
                    return True
            elif (
                in_stage
                and (m := EPOCH_LINE.match(text))
                and m.group(1) == self.stage
                and int(m.group(2)) >= self.epoch + (1 if self.batch else 0)
            ):
                return True
            elif (
                self.batch
                and in_stage
                and (m := PROGRESS_LINE.match(text))
                and m.group(1) == self.stage
                and (int(m.group(2)), int(m.group(3).replace(",", ""))) >= (self.epoch + 1, self.batch)
            ):
                return True
        return False


@dataclass(frozen=True)
class Market:
    zones: dict[str, list[tuple[float, float | None]]]
    preemptions: tuple[Preemption, ...] = ()
    speedup: float = 1.0
    origin: float = 0.0  # epoch seconds of market time 0 (the run's start)
    # flex-start: per zone, market seconds a request waits before all its nodes arrive (None: never served; a zone
    # not named: at once); such VMs are never preempted
    flex_start: dict[str, float | None] = field(default_factory=dict)
    rung: str = "spot"  # what this VM asks for: spot, flex_start or on_demand (always capacity)
    # wall seconds between a preemption's SIGTERM and SIGKILL (None: the launcher's grace); 0: no notice, SIGKILL
    notice_s: float | None = None

    @classmethod
    def from_json(cls, raw: str, origin: float) -> "Market":
        spec = json.loads(raw)
        zones = {
            z: [(float(a), None if b is None else float(b)) for a, b in windows] for z, windows in spec["zones"].items()
        }
        preemptions = tuple(Preemption(**p) for p in spec.get("preemptions", []))
        flex = {z: None if w is None else float(w) for z, w in spec.get("flex_start", {}).items()}
        notice = spec.get("notice_s")
        return cls(
            zones,
            preemptions,
            float(spec.get("speedup", 1.0)),
            origin,
            flex,
            spec.get("rung", "spot"),
            None if notice is None else float(notice),
        )

    def flex_start_served(self, zone: str, queued_at_s: float, now_s: float) -> bool:
        """A flex-start request queued in `zone` at `queued_at_s` has all its nodes by `now_s`."""
        wait = self.flex_start.get(zone, 0.0)
        return zone in self.zones and wait is not None and now_s >= queued_at_s + wait

    def now_s(self, wall: float | None = None) -> float:
        return ((time.time() if wall is None else wall) - self.origin) * self.speedup

    def has_capacity(self, zone: str, now_s: float, fired: dict[str, float]) -> bool:
        for start, end in self.zones.get(zone, []):
            if start <= now_s and (end is None or now_s < end):
                return False
        for p in self.preemptions:
            at = fired.get(p.key)
            if p.zone == zone and at is not None and at <= now_s and (p.outage_s is None or now_s < at + p.outage_s):
                return False
        return zone in self.zones

    def due_preemption(
        self, zone: str, now_s: float, fired: dict[str, float], log: list[str] = ()
    ) -> Preemption | None:
        return next((p for p in self.preemptions if p.zone == zone and p.key not in fired and p.due(now_s, log)), None)


class MarketRecord:
    """What happened in the market for one run (its launcher folder): fired preemptions, creation errors."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir

    def fired(self) -> dict[str, float]:
        try:
            return json.loads((self.state_dir / FIRED_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def fire(self, preemption: Preemption, now_s: float) -> None:
        fired = {**self.fired(), preemption.key: now_s}
        tmp = self.state_dir / (FIRED_FILE + ".tmp")
        tmp.write_text(json.dumps(fired))
        tmp.replace(self.state_dir / FIRED_FILE)

    def creation_error(self, zone: str, message: str, code: str = NO_CAPACITY) -> None:
        from datetime import datetime, timezone

        entry = {
            "zone": zone,
            "code": code,
            "message": message,
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        }
        with open(self.state_dir / ERRORS_FILE, "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def creation_errors(self) -> list[dict]:
        try:
            lines = (self.state_dir / ERRORS_FILE).read_text().splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:  # a line being written
                continue
        return out
