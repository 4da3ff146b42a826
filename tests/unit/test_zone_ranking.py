"""Zones ranked by data, through `trainctl zones`: the project's own preemption history (earlier runs'
metadata/placements.json, written here as a run's journal writes them, a broken one among them) and the simulated
cloud's capacity advice, answered in Compute Engine's shape, or refused as a project without the Preview is.
No run trains: each test costs a trainctl start (local) or a simulated cloud's start (gcp-sim), about 1-5 s."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from stacks.runs.failover import Failover
from tests.support.project import make_project
from tests.support.trainctl import trainctl


def _plant_run(root, env: str, hours_ago: float, journal: dict | str) -> str:
    """A run folder as an earlier run left it, its placements.json `journal` (a str: written as is)."""
    started = datetime.now(timezone.utc) - timedelta(hours=hours_ago)
    run_id = started.strftime("%Y%m%d-%H%M%S-") + "beef"
    meta = root / f".trainstack/{env}/bucket/fr/runs/{run_id}/metadata"
    meta.mkdir(parents=True)
    text = journal if isinstance(journal, str) else json.dumps(journal)
    (meta / "placements.json").write_text(text)
    return run_id


def _at(hours_ago: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(hours=hours_ago)).isoformat(timespec="seconds")


def test_zones_puts_the_zone_that_preempted_often_last_and_says_why(tmp_path):
    root = make_project(tmp_path / "proj")
    often = {
        "placements": [
            {
                "zone": "sim-a",
                "spot": True,
                "applied_at": _at(5),
                "ended_at": _at(3),
                "outcome": "no capacity",
                "ran": True,
            },
            {
                "zone": "sim-b",
                "spot": True,
                "applied_at": _at(3),
                "ended_at": _at(1),
                "outcome": "succeeded",
                "ran": True,
            },
        ],
        "preemptions": [{"zone": "sim-a", "detected_at": _at(4.5)}, {"zone": "sim-a", "detected_at": _at(4)}],
    }
    _plant_run(root, "local-spot", 5, often)
    _plant_run(root, "local-spot", 2, '{"placements": [ cut short')
    never_placed = _plant_run(root, "local-spot", 1, "{}")
    (root / f".trainstack/local-spot/bucket/fr/runs/{never_placed}/metadata/placements.json").unlink()
    (root / f".trainstack/local-spot/bucket/fr/runs/{never_placed}/status.json").write_text("{}")
    old = {"placements": [{"zone": "sim-b", "applied_at": _at(24 * 40), "ran": True}], "preemptions": []}
    _plant_run(root, "local-spot", 24 * 40, old)  # outside zone_history_days: never read

    r = trainctl(root, "zones", "fr", "--env", "local-spot")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line.strip() for line in r.stdout.splitlines()]
    assert (
        "ranked by data" in lines[0]
        and "history: 1 run(s) of the last 30 days (1 broken, 1 without placements skipped)" in lines[0]
    )
    assert lines[1].startswith("1. sim-b: 0.00 preemptions/h (0 over 2.0 VM h) from 1 run"), lines
    assert lines[2].startswith("2. sim-c: no runs here"), lines
    assert lines[3].startswith("3. sim-a: 1.00 preemptions/h (2 over 2.0 VM h) from 1 run, 1 without capacity"), lines

    # without history the env's order stands, and the doctor says the same order
    flat = trainctl(root, "zones", "fr", "--env", "local-spot", "--set", "defaults.zone_history_days=0")
    assert "in the env's order" in flat.stdout and [s.split(":")[0] for s in flat.stdout.split("\n  ")[1:]] == [
        "1. sim-a",
        "2. sim-b",
        "3. sim-c",
    ], flat.stdout
    doctor = trainctl(root, "doctor", "--env", "local-spot")
    assert "zones  fr: sim-b, sim-c, sim-a (history: 1 run(s)" in doctor.stdout, doctor.stdout


def test_a_run_is_never_moved_back_to_the_zone_that_preempted_it_within_zone_block_minutes():
    """The block holds in whatever order the candidates are: each pass skips the zone, the other zones are tried."""
    said: list[str] = []
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    blocked = {"b"}
    failover = Failover(
        ["a", "b", "c"],
        600,
        (60, 300),
        sleep=sleep,
        clock=lambda: clock[0],
        blocked=lambda z: "preempted" if z in blocked else None,
    )
    tried = []
    while (placement := failover.next_placement(60, said.append)) is not None:
        tried.append(placement)
    assert tried and "b" not in tried and set(tried) == {"a", "c"}, tried
    assert "skipping b: preempted" in said
    # one candidate only: nowhere else to go, so no block
    alone = Failover(["b"], 600, (60, 300), sleep=sleep, clock=lambda: clock[0], blocked=lambda z: "preempted")
    assert alone.next_placement(60, said.append) == "b"


ADVICE = (
    "gcp.simulated.overrides={zones: {europe-west4-a: {obtainability: 0.1}, "
    "europe-west4-c: {obtainability: 0.9, spot_price: 0.31}}}"
)


def test_zones_on_gcp_ranks_by_the_clouds_capacity_advice(tmp_path):
    root = make_project(tmp_path / "proj")
    r = trainctl(root, "zones", "fr", "--env", "gcp-sim", "--set", ADVICE)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line.strip() for line in r.stdout.splitlines()]
    assert "ranked by data" in lines[0] and "advice: from the cloud" in lines[0], lines
    assert lines[1].startswith("1. europe-west4-c: no runs here · obtainability 0.90, uptime ~10.0h"), lines
    assert "spot $0.31/h" in lines[1] and "daily preemption rate 5%" in lines[1]
    # the fallback zones (another region) stay after gcp.zones whatever their scores
    assert [line.split(":")[0] for line in lines[1:]] == [
        "1. europe-west4-c",
        "2. europe-west4-b",
        "3. europe-west4-a",
        "4. europe-west1-b",
        "5. europe-west1-c",
    ], lines


def test_zones_on_gcp_without_the_preview_says_no_advice_once_and_keeps_the_envs_order(tmp_path):
    root = make_project(tmp_path / "proj")
    r = trainctl(root, "zones", "fr", "--env", "gcp-sim", "--set", "gcp.simulated.overrides={advice_refused: 403}")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert out.count("no capacity advice (403:") == 1 and out.count("no capacity history (403:") == 1, out
    assert "in the env's order" in out and out.count("· no advice") == 5, out


def test_a_preempted_run_leaves_its_zone_at_once_only_for_another_open_placement(tmp_path):
    """Where no other placement of its region is open (none listed, every other one blocked, only another region's),
    or nothing blocks the zone (no block, a rung that is not preempted, an interruption that was a crashed peer),
    the run waits where it is for its group; else it leaves, saying why."""
    from types import SimpleNamespace

    from stacks.runs.failover import RunJournal
    from stacks.runs.moves import leave_after_preemption
    from trainer.storage import open_bucket

    def run_in(zone: str, *, spot: bool = True, block: float = 60):
        settings = SimpleNamespace(spot=spot, zone_block_minutes=block)
        target = SimpleNamespace(describe_placement=lambda p: f"zone {p.zone}")
        placement = SimpleNamespace(zone=zone, region="r1")
        return SimpleNamespace(placement=placement, settings=settings, target=target, run_id="r1")

    journal = RunJournal(open_bucket(f"file://{tmp_path}"), "fr", "r1")
    journal.data["preemptions"] = [{"zone": "c", "detected_at": _at(0.2)}, {"zone": "b", "detected_at": _at(0.1)}]
    said = SimpleNamespace(lines=[], info=lambda line: said.lines.append(line), warn=lambda line: None)
    phases = []

    def leave(run, *zones, region="r1"):
        candidates = [SimpleNamespace(zone=z, region=region if z != run.placement.zone else "r1") for z in zones]
        return leave_after_preemption(
            run, said, journal, Failover(candidates, 600, (60, 300)), lambda phase, run_id=None: phases.append(phase)
        )

    assert "it preempted this run; blocked until" in leave(run_in("b"), "b", "a")
    assert phases == ["moving"]  # a Ctrl-C from here stops the run resumable
    assert leave(run_in("b"), "b") is None
    assert leave(run_in("b"), "b", "c") is None  # c preempted it too
    assert leave(run_in("b"), "b", "a", region="r2") is None  # another region: egress billed
    assert len(said.lines) == 3 and all("no other placement in its region is open" in x for x in said.lines), said.lines
    assert "waits there for its group" in said.lines[0] and "zone b is blocked for run r1" in said.lines[0]
    assert leave(run_in("b", block=0), "b", "a") is None
    assert leave(run_in("b", spot=False), "b", "a") is None
    assert leave(run_in("a"), "a", "c") is None  # a never preempted it
    journal.data["preemptions"][-1]["cause"] = "interrupted"  # a crashed peer, not the zone's doing
    assert leave(run_in("b"), "b", "a") is None
