"""Benchmark: capacity policies on the same seeded Spot markets, in market time.

    .venv/bin/python -m benchmarks.spot_market --policies [--profiles calm typical harsh] [--seeds 40]

A team retrains one model again and again: runs back to back over two market weeks, each needing `WORK_H` hours of
training, in a market of three zones drawn from the profile as benchmarks/spot_market.py draws its markets
(preemptions a Poisson process per zone, each leaving its zone dry for a log-normal outage, correlated within a
region), with one difference the public traces show and a uniform draw hides: zones differ, each zone's rate is the
profile's times a log-normal factor (sigma 0.8, mean 1), fixed for the horizon. Flex-start requests wait a
log-normal time (median 15 min, long tail), their VMs are never preempted.

The lifecycle is the real one where it decides: stacks.runs.failover.Failover (the pass over every placement, the
backoff pauses, capacity_wait_minutes, the ladder's next rung at the end of a pass) on a simulated clock; the
rest is its timing: a VM boots in `BOOT_S` (created, image, data, the trainer at its checkpoint); a group that cannot
create one retries and the run moves after `creation_error_minutes`; checkpoints every `checkpoint_minutes`.

Policies:
- in order (until now): zones in the order typed; a preempted VM is recreated by its group in its own zone;
- ranked (what ships): zones ordered by this project's own preemption history (earlier runs' preemptions per VM
  hour, the zone's); a preempted VM is recreated in its zone by its group, and the run's moves skip that zone for
  `zone_block_minutes` (the real Failover's `blocked`);
- ranked + flex: as ranked, with capacity [spot, flex_start] (a dry pass takes flex-start); what ships with
  zone_block_minutes 0;
- ranked + flex, move at preemption (what ships by default): the run leaves the zone that preempted it at once
  (stacks.runs.moves.leave_after_preemption);
- the notice handled (a checkpoint at the batch the notice finds: half a batch lost) or not (the work since the last
  periodic checkpoint lost): in order, both ways; the others with it.

Figures per run, means over seeds and runs (the p95s over every one): goodput (training hours needed / VM hours
billed), time to first epoch, p95 preemption -> training again, work lost per preemption, cost per run of two
machines in europe-west4 at the rates the product prices them at (MACHINES below).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from stacks.runs.failover import Failover

ZONES = ("sim-a", "sim-b", "sim-c")
CORRELATED = {("sim-a", "sim-b"): 0.43, ("sim-a", "sim-c"): 0.14}
PROFILES = {"calm": 0.1, "typical": 0.3, "harsh": 1.0}  # preemptions per zone and hour, as spot_market.py

HORIZON_S = 14 * 24 * 3600
WORK_H = 4.0  # training hours a run needs
EPOCH_S = 20 * 60  # an epoch: the first one done is the "time to first epoch"
CHECKPOINT_S = 10 * 60  # trainer.checkpoint_minutes: checkpoints inside an epoch this often
BATCH_S = 0.5
BOOT_S = 180.0  # a VM created, the image pulled, the data read, the trainer at its checkpoint
MOVE_S = 60.0  # destroy + apply at another placement
CREATION_ERROR_S = 10 * 60  # creation_error_minutes
CAPACITY_WAIT_S = 60 * 60  # capacity_wait_minutes
FLEX_WAIT_LIMIT_S = 60 * 60  # flex_start_wait_minutes
ZONE_BLOCK_S = 60 * 60  # zone_block_minutes
FLEX_MEDIAN_S = 15 * 60
RUNG_KEYS = ("spot", "flex_start", "on_demand")
# Each machine priced as the product prices it (stacks/targets/gcp/prices.py rung_per_hour: prices.yaml's Spot and
# on-demand rates; flex-start at on-demand less the series' published discount: G2 none, A2 53 %)
MACHINES = {
    "g2-standard-8 + L4": ("g2-standard-8", "nvidia-l4"),
    "a2-highgpu-1g + A100": ("a2-highgpu-1g", "nvidia-tesla-a100"),
}


def prices() -> dict[str, dict[str, float]]:
    from stacks.targets.gcp.prices import fallback_book, rung_per_hour

    book = fallback_book()
    return {
        name: {rung: rung_per_hour(book, "europe-west4", machine, gpu, 1, rung)[0] for rung in RUNG_KEYS}
        for name, (machine, gpu) in MACHINES.items()
    }


@dataclass
class Market:
    """One drawn market: each zone's dry windows and the moments it takes a VM back."""

    dry: dict[str, list[tuple[float, float]]]
    preempt: dict[str, list[float]]
    rng: random.Random

    def has_capacity(self, zone: str, t: float) -> bool:
        return not any(a <= t < b for a, b in self.dry[zone])

    def capacity_at(self, zone: str, t: float) -> float:
        """The first moment at or after t the zone has capacity."""
        while True:
            ends = [b for a, b in self.dry[zone] if a <= t < b]
            if not ends:
                return t
            t = max(ends)

    def next_preemption(self, zone: str, after: float) -> float:
        return min((p for p in self.preempt[zone] if p > after), default=math.inf)

    def flex_wait(self) -> float:
        return min(self.rng.lognormvariate(math.log(FLEX_MEDIAN_S), 1.0), 12 * 3600)


def draw(rate_per_h: float, seed: int) -> Market:
    rng = random.Random(seed)
    factors = [rng.lognormvariate(-0.32, 0.8) for _ in ZONES]  # mean 1 (sigma 0.8)
    dry: dict[str, list] = {z: [] for z in ZONES}
    preempt: dict[str, list] = {z: [] for z in ZONES}
    for zone, factor in zip(ZONES, factors):
        t = 0.0
        while True:
            t += rng.expovariate(rate_per_h * factor) * 3600
            if t > HORIZON_S:
                break
            outage = min(rng.lognormvariate(math.log(0.4 * 3600), 1.0), 6 * 3600)
            dry[zone].append((t, t + outage))
            preempt[zone].append(t)
            for (first, other), p in CORRELATED.items():
                if zone == first and rng.random() < p:
                    dry[other].append((t, t + outage * rng.uniform(0.5, 1.0)))
    return Market(dry, preempt, random.Random(seed + 1))


@dataclass(frozen=True)
class Policy:
    name: str
    ranked: bool = False
    ladder: tuple[str, ...] = ("spot",)
    notice: bool = True
    move_at_preemption: bool = False  # leave the zone that preempted the run at once (else its group recreates there)


POLICIES = (
    Policy("in order", notice=False),
    Policy("in order"),
    Policy("ranked", ranked=True),
    Policy("ranked + flex", ranked=True, ladder=("spot", "flex_start")),
    Policy("ranked + flex, move at preemption", ranked=True, ladder=("spot", "flex_start"), move_at_preemption=True),
)


@dataclass
class History:
    """The project's own record across runs (the placements.json files): VM seconds and preemptions per zone."""

    vm_s: dict[str, float] = field(default_factory=lambda: {z: 0.0 for z in ZONES})
    preemptions: dict[str, int] = field(default_factory=lambda: {z: 0 for z in ZONES})

    def rate(self, zone: str) -> float:
        return self.preemptions[zone] / max(self.vm_s[zone] / 3600, 1.0)  # a zone barely seen ranks as clean

    def ranked(self, blocked: dict[str, float], now: float) -> list[str]:
        return sorted(ZONES, key=lambda z: (blocked.get(z, -1) > now, self.rate(z), ZONES.index(z)))


@dataclass
class RunResult:
    ended: float
    stops: int  # times it waited capacity_wait_minutes in vain (stopped, resumable) and was resumed at once
    billed: dict[str, float]
    first_epoch_s: float | None
    back_s: list[float]
    lost_s: list[float]

    def cost(self, price: dict[str, float]) -> float:
        return sum(price[r] * s / 3600 for r, s in self.billed.items())


def one_run(market: Market, policy: Policy, start: float, history: History) -> RunResult:
    clock = {"t": start}
    blocked: dict[str, float] = {}
    rung_i, stops = 0, 0
    done = 0.0
    billed = {r: 0.0 for r in RUNG_KEYS}
    first_epoch, back, lost, preempted_at = None, [], [], None

    def order() -> list[str]:
        return history.ranked(blocked, clock["t"]) if policy.ranked else list(ZONES)

    def next_rung() -> bool:
        nonlocal rung_i
        if rung_i + 1 >= len(policy.ladder):
            return False
        rung_i += 1
        failover.candidates[:] = order()
        return True

    def sleep(s: float) -> None:
        clock["t"] += s

    def block(zone: str) -> str | None:
        return "preempted the run" if policy.ranked and blocked.get(zone, -1) > clock["t"] else None

    def new_failover() -> Failover:
        return Failover(
            order(),
            CAPACITY_WAIT_S,
            (60.0, 300.0),
            sleep=sleep,
            clock=lambda: clock["t"],
            pass_done=next_rung,
            blocked=block,
        )

    failover = new_failover()
    zone = failover.candidates[0]
    while done < WORK_H * 3600:
        rung = policy.ladder[rung_i]
        t = clock["t"]
        # get a VM in `zone` at `rung`: (created at, or None after the placement's wait)
        if rung == "flex_start":
            wait = market.flex_wait()
            created = t + wait if wait <= FLEX_WAIT_LIMIT_S else None
            limit = FLEX_WAIT_LIMIT_S
        elif rung == "on_demand":
            created, limit = t, 0.0
        else:
            back_at = market.capacity_at(zone, t)
            created = back_at if back_at - t < CREATION_ERROR_S else None
            limit = CREATION_ERROR_S
        if created is None:
            clock["t"] += limit
            following = failover.next_placement(limit, lambda _m: None)
            if following is None:  # stopped, resumable: resumed at once (its own first rung again)
                stops, rung_i = stops + 1, 0
                failover = new_failover()
                following = failover.candidates[0]
            clock["t"] += MOVE_S
            zone = following
            continue
        failover.vm_came()
        clock["t"] = created
        training_from = created + BOOT_S
        if preempted_at is not None:
            back.append(training_from - preempted_at)
        end = training_from + (WORK_H * 3600 - done)
        taken = market.next_preemption(zone, created) if rung == "spot" else math.inf
        history.vm_s[zone] += min(end, taken) - created
        billed[rung] += min(end, taken) - created
        if taken >= end:
            if first_epoch is None:
                first_epoch = training_from + EPOCH_S - start
            clock["t"] = end
            return RunResult(end, stops, billed, first_epoch, back, lost)
        trained = max(taken - training_from, 0.0)
        if first_epoch is None and done + trained >= EPOCH_S:
            first_epoch = training_from + (EPOCH_S - done) - start
        # checkpoints every CHECKPOINT_S since this VM began training; the notice saves at the batch it finds
        lost.append(min(BATCH_S / 2 if policy.notice else trained % CHECKPOINT_S, trained))
        done += trained - lost[-1]
        history.preemptions[zone] += 1
        preempted_at, clock["t"] = taken, taken
        if policy.ranked:
            blocked[zone] = taken + ZONE_BLOCK_S  # its moves skip the zone (Failover's `blocked`)
        if policy.move_at_preemption:  # the run leaves at once for the best other zone
            failover.candidates[:] = order()
            failover.index = -1
            zone = failover.next_placement(0.0, lambda _m: None) or zone
            clock["t"] += MOVE_S
        # else the group recreates the VM in its own zone (the loop above waits for capacity there)
    return RunResult(clock["t"], stops, billed, first_epoch, back, lost)


def campaign(market: Market, policy: Policy) -> list[RunResult]:
    """Runs back to back over the horizon (a stopped run is resumed at once, as its --resume would)."""
    history, t, results = History(), 0.0, []
    while t < HORIZON_S - 2 * WORK_H * 3600:
        result = one_run(market, policy, t, history)
        results.append(result)
        t = result.ended
    return results


def p95(values: list[float]) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, math.ceil(0.95 * len(values)) - 1)]


def table(profiles: list[str], seeds: int) -> list[dict]:
    price = prices()
    rows = []
    for profile in profiles:
        for policy in POLICIES:
            runs, hours = [], []
            for seed in range(seeds):
                start = 0.0
                for r in campaign(draw(PROFILES[profile], seed), policy):
                    runs.append(r)
                    hours.append((r.ended - start) / 3600)
                    start = r.ended
            billed_s = sum(sum(r.billed.values()) for r in runs)
            backs = [b for r in runs for b in r.back_s]
            losses = [x for r in runs for x in r.lost_s]
            firsts = [r.first_epoch_s for r in runs if r.first_epoch_s is not None]
            rows.append(
                {
                    "profile": profile,
                    "policy": policy.name,
                    "notice": policy.notice,
                    "runs_per_fortnight": round(len(runs) / seeds, 1),
                    "stopped": sum(r.stops for r in runs),
                    "hours_per_run": round(statistics.mean(hours), 2),
                    "goodput": round(WORK_H * 3600 * len(runs) / billed_s, 3),
                    "first_epoch_p95_min": round(p95(firsts) / 60, 1),
                    "back_p95_min": round(p95(backs) / 60, 1) if backs else None,
                    "lost_per_preemption_s": round(statistics.mean(losses), 1) if losses else None,
                    "preemptions_per_run": round(len(losses) / len(runs), 2),
                    **{f"cost {m}": round(statistics.mean(r.cost(p) for r in runs), 2) for m, p in price.items()},
                    "flex_share": round(sum(r.billed["flex_start"] for r in runs) / billed_s, 2),
                }
            )
    return rows


def markdown(rows: list[dict]) -> str:
    costs = [k for k in rows[0] if k.startswith("cost ")]
    head = (
        "| profile | policy | notice | runs / fortnight (stops) | hours / run | goodput | first epoch p95 | back p95 "
        "| lost / preemption | preemptions / run | "
        + " | ".join(f"{c.removeprefix('cost ')}: cost / run" for c in costs)
        + " | flex-start hours |\n|"
        + "---|" * (11 + len(costs))
        + "\n"
    )
    lines = [
        f"| {r['profile']} | {r['policy']} | {'on' if r['notice'] else 'off'} | {r['runs_per_fortnight']} "
        f"({r['stopped']}) | {r['hours_per_run']} | {r['goodput']} | {r['first_epoch_p95_min']} min "
        f"| {r['back_p95_min']} min | {r['lost_per_preemption_s']} s | {r['preemptions_per_run']} | "
        + " | ".join(f"${r[c]}" for c in costs)
        + f" | {r['flex_share']:.0%} |"
        for r in rows
    ]
    return head + "\n".join(lines)
