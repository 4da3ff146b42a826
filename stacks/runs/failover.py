"""Moving a run to where the capacity is, apart from provisioning (the targets give the candidates).

The target orders a run's candidate placements (gcp: `zones`, then `fallback_zones`, each with quota; local:
the simulated market's zones). When the run's group reports only capacity or quota errors for
`creation_error_minutes` while the run has no VM (at start, or after a preemption), the lifecycle destroys
the stack and applies it again at the next candidate for the same run id, which resumes from its last
checkpoint; the bucket stays where it is. The candidates are ranked by data and a zone that preempted the run is
skipped for `zone_block_minutes` (stacks.runs.zone_ranking). After a pass over every candidate it waits (backoff,
nothing applied, nothing billed) and tries them again, until the run has been without a VM for
`capacity_wait_minutes`: then it stops, resumable.

`RunJournal` keeps what happened in `metadata/placements.json`: each placement tried and how it ended,
each preemption seen (detected, training again), the time spent waiting for capacity.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from trainer.runfiles.keys import PLACEMENTS_META as PLACEMENTS
from trainer.runfiles.keys import run_key
from trainer.runfiles.status_file import INTERRUPTED_STAGE, RUNNING, SUCCEEDED, RunStatus
from trainer.runfiles.timestamps import now_iso


@dataclass
class Failover:
    """The next placement to try for a run that has no VM, or None once waiting is over."""

    candidates: list
    wait_limit_s: float
    backoff_s: tuple[float, float]  # first and longest pause between passes over every candidate
    sleep: object = time.sleep
    clock: object = time.monotonic
    index: int = 0
    without_vm_since: float | None = None
    tried_in_pass: int = 0
    pauses: int = 0
    tried_blocked: list = field(default_factory=list)  # the last full pass's blocked placements (not asked)
    pass_done: object = None  # called when every candidate failed in a pass; True: it changed them, no pause
    ruled_out: list = field(default_factory=list)  # predicates of placements the pass's errors would meet too
    describe: object = str  # a placement in a few words (the target's describe_placement)
    # placement -> why it may not take the run now (the zone that preempted it, for zone_block_minutes), else None;
    # asked at every move, so a block holds whatever order the candidates are in
    blocked: object = None
    blocked_in_pass: list = field(default_factory=list)  # the placements the block skipped in this pass

    def vm_came(self) -> None:
        """A VM runs the trainer again: the next stretch without one starts its own clock."""
        self.without_vm_since, self.tried_in_pass, self.pauses, self.ruled_out = None, 0, 0, []

    def next_placement(self, failed_for_s: float, say, rules_out=()) -> object | None:
        """After the current placement found no capacity for `failed_for_s`: the next one (after a pause when
        every candidate failed in this pass), or None when the run has waited `wait_limit_s` without a VM.
        `rules_out`: predicates of placements its errors would meet too (a regional quota: the region's other
        zones), skipped for the rest of this pass. The first pass tries every candidate, however short the wait."""
        self.ruled_out += list(rules_out)
        while True:
            placement = self._next(failed_for_s, say)
            failed_for_s = 0.0
            if placement is None:
                return None
            # one candidate: nowhere else to go, the block would only stop the run
            why = self.blocked(placement) if self.blocked is not None and len(self.candidates) > 1 else None
            if why:
                say(f"skipping {self.describe(placement)}: {why}")
                self.blocked_in_pass.append(placement)
            elif not any(rule(placement) for rule in self.ruled_out):
                return placement
            else:
                say(f"skipping {self.describe(placement)}: the error that stopped the run would come there too")

    def _next(self, failed_for_s: float, say) -> object | None:
        now = self.clock()
        if self.without_vm_since is None:
            self.without_vm_since = now - failed_for_s
        self.tried_in_pass += 1
        if self.tried_in_pass >= len(self.candidates):
            self.ruled_out = []  # a new pass: a quota may have been freed meanwhile
            self.tried_blocked, self.blocked_in_pass = list(self.blocked_in_pass), []
        if self.tried_in_pass >= len(self.candidates) and self.pass_done is not None and self.pass_done():
            self.tried_in_pass, self.index = 0, 0
            return self.candidates[0]
        if self.tried_in_pass >= len(self.candidates):
            pause = min(self.backoff_s[0] * 2**self.pauses, self.backoff_s[1])
            left = self.without_vm_since + self.wait_limit_s - now
            if left <= 0:
                return None
            pause = min(pause, left)
            say(
                f"no capacity in any of {len(self.candidates)} placement(s): trying them again in {pause:.0f}s "
                f"(nothing applied meanwhile; {left / 60:.1f} of capacity_wait_minutes left)"
            )
            self.sleep(pause)
            self.pauses += 1
            self.tried_in_pass = 0
        elif self.pauses and self.clock() - self.without_vm_since >= self.wait_limit_s:
            return None
        self.index = (self.index + 1) % len(self.candidates)
        return self.candidates[self.index]

    def waited_s(self) -> float:
        return 0.0 if self.without_vm_since is None else self.clock() - self.without_vm_since


@dataclass
class RunJournal:
    """metadata/placements.json of one run (appended to by every invocation that moves or resumes it)."""

    bucket: object
    lang: str
    run_id: str
    data: dict = field(default_factory=dict)
    _stage: str | None = None
    _running: bool = False

    def __post_init__(self):
        key = run_key(self.lang, self.run_id, PLACEMENTS)
        try:
            self.data = json.loads(self.bucket.read_bytes(key)) if self.bucket.exists(key) else {}
        except ValueError:
            self.data = {}
        self.data.setdefault("placements", [])
        self.data.setdefault("preemptions", [])
        self.data.setdefault("capacity_wait_s", 0.0)

    def _save(self) -> None:
        """Best effort: the record must never stop a run being followed (the next save writes it all)."""
        try:
            self.bucket.write_bytes(
                run_key(self.lang, self.run_id, PLACEMENTS), json.dumps(self.data, indent=2).encode()
            )
        except Exception:
            pass

    def placed(self, where: dict) -> None:
        self.data["placements"].append({**where, "applied_at": now_iso(), "ended_at": None, "outcome": None})
        self._save()

    def ended(self, outcome: str) -> None:
        """How the current placement ended: finished, no capacity, quota, gave up, ..."""
        if self.data["placements"] and self.data["placements"][-1]["ended_at"] is None:
            self.data["placements"][-1].update(ended_at=now_iso(), outcome=outcome)
            self._save()

    def _mark(self, **fields) -> None:
        """Facts of the current placement: `ran` (a VM trained there), `preempted` (how many times)."""
        if self.data["placements"]:
            self.data["placements"][-1].update(fields)
        self._save()

    def open_preemption(self) -> dict | None:
        """The newest interruption record while the run has not trained again since (None: none open)."""
        last = self.data["preemptions"][-1] if self.data["preemptions"] else None
        return last if last is not None and last.get("training_again_at") is None else None

    def _interrupted_here(self, status: RunStatus) -> bool:
        """A status first read at the interrupted stage, written by the trainer after the current placement was
        applied: a VM of this placement trained and was interrupted before the first read (a short stage, a slow
        poll). Not one this journal already holds open (an earlier follower's)."""
        placements = self.data["placements"]
        if not placements or placements[-1].get("ended_at") is not None or self.open_preemption() is not None:
            return False
        return _after(status.updated_at, placements[-1].get("applied_at"))

    def waited(self, seconds: float) -> None:
        self.data["capacity_wait_s"] = round(self.data["capacity_wait_s"] + seconds, 1)
        self._save()

    def observe(self, status: RunStatus | None) -> str | None:
        """Told every status read: a preemption is the run going to the interrupted stage; training again,
        leaving it. -> "started" (first seen running), "preempted", "training" (again), else None."""
        if status is None:
            return None
        stage, before = status.stage, self._stage
        self._stage = stage
        # SUCCEEDED too: a VM trained (only the trainer writes it), though the run ended between two reads
        trained = status.state in (RUNNING, SUCCEEDED)
        if not self._running and stage != INTERRUPTED_STAGE and trained:
            self._running = True  # first seen training (after a local queue for cores, too)
            self._mark(ran=True)
            return "started"
        seen_first = before is None and stage == INTERRUPTED_STAGE and self._interrupted_here(status)
        if stage == INTERRUPTED_STAGE and (before not in (None, INTERRUPTED_STAGE) or seen_first):
            self._running = True  # a VM trained (seen or not): its next training is "training" again
            zone = self.data["placements"][-1].get("zone") if self.data["placements"] else None
            self.data["preemptions"].append(
                {
                    "detected_at": now_iso(),
                    "zone": zone,
                    "cause": interruption_cause(status),
                    "stage": before,
                    "epoch": status.epoch,
                    "training_again_at": None,
                    "lost_s": None,
                }
            )
            self._mark(
                ran=True,
                preempted=(self.data["placements"][-1].get("preempted", 0) + 1) if self.data["placements"] else 1,
            )
            return "preempted"
        if before == INTERRUPTED_STAGE and stage != INTERRUPTED_STAGE and trained:
            p = self.open_preemption()
            if p is not None:
                from trainer.runfiles.timestamps import parse_time

                p["training_again_at"] = now_iso()
                p["lost_s"] = round(
                    (parse_time(p["training_again_at"]) - parse_time(p["detected_at"])).total_seconds(), 1
                )
            self._mark(ran=True)
            return "training"
        return None


def interruption_cause(status: RunStatus) -> str:
    """ "preempted": the trainer was told to stop (the Spot notice, the shutdown script: its status says "preempted:
    ..."); "interrupted": a peer process went away (a crash, or a node of a multi-node run preempted: rank 0 cannot
    tell which). Only the first blocks the zone and counts in its history."""
    return "preempted" if (status.error or "").startswith("preempted") else "interrupted"


def counts_as_preemption(record: dict) -> bool:
    """A journal's interruption record that was a preemption (records from before `cause` was kept: all were)."""
    return record.get("cause", "preempted") == "preempted"


def _after(later: str | None, earlier: str | None) -> bool:
    from trainer.runfiles.timestamps import parse_time

    a, b = parse_time(later), parse_time(earlier)
    return a is not None and b is not None and a > b


def read_journal(bucket, lang: str, run_id: str) -> dict | None:
    """A run's metadata/placements.json (None: never written, e.g. a run from before failover)."""
    from trainer.runfiles.readers import read_json

    return read_json(bucket, run_key(lang, run_id, PLACEMENTS))
