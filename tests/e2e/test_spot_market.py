"""Spot capacity and preemption on the local target's simulated market (envs/local-spot.yaml): the real
trainctl, Terraform, supervisor and trainer, the same lifecycle code a gcp run goes through.

The overlay's market: sim-a dry when the run starts, sim-b preempted once the classifier has trained an
epoch (dry for good after it), sim-c with capacity. Triggers are events (a stage's epoch, read from the lines
of the run's append-only log its trainer on that VM wrote), not times.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.project import SAMPLE, TINY_SETS, make_project
from tests.support.trainctl import trainctl
from trainer.launchers.local import supervisor

ENV = "local-spot"
QUICK = ["--env", ENV, *TINY_SETS, "--set", "defaults.creation_error_minutes=0.05", "--set", "defaults.capacity=[spot]"]


def _runs(root: Path) -> Path:
    return root / f".trainstack/{ENV}/bucket/fr/runs"


def _only_run(root: Path) -> str:
    [run_id] = [p.name for p in _runs(root).iterdir()]
    return run_id


def _read(root: Path, run_id: str, name: str) -> dict:
    return json.loads((_runs(root) / run_id / name).read_text())


def _nothing_left(root: Path) -> None:
    state = root / f".trainstack/{ENV}/state/train-fr.tfstate"
    assert json.loads(state.read_text())["resources"] == [], "terraform state still holds resources"
    for procs in (root / f".trainstack/{ENV}/procs").glob("*"):
        pid = supervisor.read_pid(procs)
        assert pid is None or not supervisor._alive(pid), f"trainer supervisor {pid} still running"


@pytest.fixture
def spot(tmp_path):
    root = make_project(tmp_path / "proj")
    r = trainctl(root, "data", "push", "fr", str(SAMPLE / "fr"), "--env", ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    yield root
    trainctl(root, "destroy", "fr", "--env", ENV)


def test_a_dry_zone_and_a_preemption_move_the_run_which_resumes_exactly(spot, trained_fr):
    # sim-a dry for good here (the overlay's hour of market time could end on a slow, busy core); sim-b has capacity
    # again at once after its preemption: the run never goes back there (zone_block_minutes), it moves to sim-c
    r = trainctl(
        spot,
        "train",
        "fr",
        *QUICK,
        "--set",
        "local.spot_market.zones.sim-a.outages=[{start_s: 0}]",
        "--set",
        "local.spot_market.preemptions=[{zone: sim-b, stage: classifier, epoch: 1, outage_s: 0}]",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = _only_run(spot)  # one run id however often it moved
    status = _read(spot, run_id, "status.json")
    assert status["state"] == "SUCCEEDED" and status["resumed"] >= 1
    journal = _read(spot, run_id, "metadata/placements.json")
    placed = [(p["zone"], p["outcome"], p.get("ran", False)) for p in journal["placements"]]
    # the zone that preempted it is left at once, not waited in for its group (zone_block_minutes)
    assert placed == [("sim-a", "no capacity", False), ("sim-b", "preempted", True), ("sim-c", "succeeded", True)]
    [preemption] = journal["preemptions"]
    # the stage `train` last saw before the interruption: its poll (1 s) may miss the tiny stages before the
    # classifier's first epoch, where the market preempts (said by the log, below)
    assert preemption["zone"] == "sim-b" and preemption["stage"] in (
        "base_lm",
        "lm_finetune",
        "classifier",
        "evaluating",
        "uploading",
    )
    assert preemption["lost_s"] > 0
    assert journal["capacity_wait_s"] > 0
    out = r.stdout + r.stderr
    assert "moved to zone sim-b (simulated)" in out and "moved to zone sim-c (simulated)" in out
    assert "was interrupted in zone sim-b" in out and "training again in zone sim-c" in out
    assert "leaves zone sim-b (simulated) at once: it preempted this run; blocked until" in out
    log = (_runs(spot) / run_id / "log.txt").read_text()
    assert "spot market: Spot VM in sim-b preempted" in log and "resume #1" in log
    # The notice (SIGTERM) became a checkpoint at the end of the batch it came in: the status said where, the
    # resumed trainer started there.
    # (the market reads the log as it polls: on a busy core the notice may come once the classifier's last epoch
    # ended, and the checkpoint is that stage's end)
    saved = re.search(
        r"preempted: checkpoint saved at (?:epoch (\d+) batch (\d+) \((\w+) phase (\d+)\)|the end of (\w+))", log
    )
    assert saved, log
    assert saved.group(0) in out  # `train` showed it as it followed the log
    epoch, batch, stage, phase, ended = saved.groups()
    if ended:
        resumed_at = f"resuming from checkpoint: {ended} finished"
    else:
        resumed_at = f"{stage}: resumed at {stage} phase {phase}, epoch {epoch}" + (
            f", batch {batch}" if batch != "0" else ""
        )
    assert re.search(re.escape(resumed_at) + r"$", log, re.M), (resumed_at, log)
    assert log.count("== stage preparing") == 2, "a log line printed twice, or a start lost"
    assert out.count("== stage preparing") == 2, "train printed the log again after a move"
    # Every move visible: `trainctl runs`, the report, the MLflow record (stacks.tracking) read the same journal.
    [row] = json.loads(trainctl(spot, "runs", "--json", "--env", ENV).stdout)
    assert row["placements"] == ["sim-a", "sim-b", "sim-c"] and row["ran_in"] == ["sim-b", "sim-c"]
    assert row["preemptions"] == 1 and row["capacity_wait_s"] > 0 and row["interrupted_s"] > 0
    report = (_runs(spot) / run_id / "report.html").read_text()
    assert "<h2>Placements</h2>" in report and "1 preemption(s)" in report
    # Exact resume: the same figures, epoch by epoch, as the undisturbed run with the same seed and settings.
    undisturbed_root, undisturbed_id, _ = trained_fr
    undisturbed = json.loads(
        (undisturbed_root / ".trainstack/local/bucket/fr/runs" / undisturbed_id / "metrics.json").read_text()
    )
    metrics = _read(spot, run_id, "metrics.json")
    assert metrics["macro_f1"] == undisturbed["macro_f1"] and metrics["micro_f1"] == undisturbed["micro_f1"]
    assert [(h["stage"], h["epoch"], h.get("valid_loss")) for h in metrics["history"]] == [
        (h["stage"], h["epoch"], h.get("valid_loss")) for h in undisturbed["history"]
    ]
    _nothing_left(spot)


def test_every_zone_dry_stops_resumable_with_exit_3_then_resume_finishes_it(spot, tmp_path):
    # the resume's refusals cost a synth each, no training; 30 s of capacity wait: its passes after the preemption skip
    # the zone that preempted it
    dry = [
        "--set",
        "local.spot_market.zones.sim-a.outages=[{start_s: 0}]",
        "--set",
        "local.spot_market.zones.sim-c.outages=[{start_s: 0}]",
        "--set",
        "defaults.capacity_wait_minutes=0.5",
    ]
    r = trainctl(spot, "train", "fr", *QUICK, *dry)
    assert r.returncode == 3, r.stdout + r.stderr
    run_id = _only_run(spot)
    assert f"trainctl train fr --env {ENV} --resume {run_id}" in r.stderr
    status = _read(spot, run_id, "status.json")
    assert status["state"] == "FAILED" and "no capacity" in status["error"]
    checkpoints = sorted(p.name for p in (_runs(spot) / run_id / "checkpoints").iterdir())
    assert any("classifier" in name for name in checkpoints), checkpoints  # it trained before it was stopped
    journal = _read(spot, run_id, "metadata/placements.json")
    zones = [p["zone"] for p in journal["placements"]]
    assert zones[:4] == ["sim-a", "sim-b", "sim-c", "sim-a"]
    assert journal["placements"][-1]["outcome"] == "no capacity" and journal["capacity_wait_s"] >= 12
    # sim-b preempted the run: its later passes skip it (zone_block_minutes), trying only the other zones
    assert "sim-b" not in zones[2:] and len(zones) >= 5, zones
    said = r.stdout + r.stderr
    assert "skipping zone sim-b (simulated): it preempted this run; blocked until" in said, said
    _nothing_left(spot)  # nothing running, nothing billed while it waits for the user

    # A resume that changes the model's shape is refused before anything is applied, each difference listed.
    no_market = ["--set", "local.spot_market.preemptions=[]"]
    shape = trainctl(spot, "train", "fr", *QUICK, "--resume", run_id, "--set", "defaults.trainer.n_hid=128", *no_market)
    assert shape.returncode == 2 and "languages.fr.trainer.n_hid 64 -> 128" in shape.stderr, shape.stdout + shape.stderr
    assert "applying" not in shape.stdout + shape.stderr
    # Other data pushed while it waits: the run keeps its own copy.
    new = tmp_path / "new"
    new.mkdir()
    lines = (SAMPLE / "fr" / "train.csv").read_text().splitlines(keepends=True)
    (new / "train.csv").write_text("".join(lines[:281]))
    push = trainctl(spot, "data", "push", "fr", str(new), "--replace", "--env", ENV)
    assert push.returncode == 0, push.stdout + push.stderr
    # Without that copy (a run from before runs kept one) its checkpoints would not fit the new data: refused
    # before apply, naming where the push kept the version it trained on.
    record = _runs(spot) / run_id / "metadata/data.json"
    kept = record.read_bytes()
    record.unlink()
    legacy = trainctl(spot, "train", "fr", *QUICK, "--resume", run_id, *no_market)
    assert legacy.returncode == 2 and "fr/data/previous/" in legacy.stderr, legacy.stdout + legacy.stderr
    record.write_bytes(kept)
    _nothing_left(spot)

    # Capacity is back (no preemption left): the same run continues from its checkpoint, on its own data; the
    # one setting that differs (capacity_wait_minutes, the overlay's again) is a change it may make.
    again = trainctl(spot, "train", "fr", *QUICK, "--resume", run_id, *no_market)
    assert again.returncode == 0, again.stdout + again.stderr
    said = again.stdout + again.stderr
    assert "resumes on its own copy of its data" in said and "data ok: 380 rows" in said  # checked as it trains
    assert _read(spot, run_id, "metrics.json")["n_train"] + _read(spot, run_id, "metrics.json")["n_valid"] == 380
    change = "languages.fr.capacity_wait_minutes 0.5 -> 1.0"
    assert f"settings changed by trainctl (--resume): {change}" in (_runs(spot) / run_id / "log.txt").read_text()
    [entry] = _read(spot, run_id, "metadata/changes.json")["changes"]
    assert entry["settings"] == [{"key": "languages.fr.capacity_wait_minutes", "from": 0.5, "to": 1.0}]
    assert _read(spot, run_id, "metadata/config.json")["languages"]["fr"]["capacity_wait_minutes"] == 0.5
    assert _only_run(spot) == run_id
    status = _read(spot, run_id, "status.json")
    assert status["state"] == "SUCCEEDED" and status["resumed"] == 1 and status["error"] is None
    log = (_runs(spot) / run_id / "log.txt").read_text()
    assert "resumed by trainctl (--resume)" in log and "resume #1" in log
    history = _read(spot, run_id, "metrics.json")["history"]
    epochs = [h["epoch"] for h in history if h["stage"] == "classifier"]
    assert epochs == list(range(1, len(epochs) + 1)), "an epoch was lost or repeated across the stop"
    _nothing_left(spot)
    # A run that succeeded is not resumed again.
    done = trainctl(spot, "train", "fr", *QUICK, "--resume", run_id)
    assert done.returncode == 2 and "already SUCCEEDED" in done.stderr


EVERY_ZONE_DRY = [
    "--set",
    "local.spot_market.zones.sim-a.outages=[{start_s: 0}]",
    "--set",
    "local.spot_market.zones.sim-b.outages=[{start_s: 0}]",
    "--set",
    "local.spot_market.zones.sim-c.outages=[{start_s: 0}]",
]


def test_no_capacity_wait_still_tries_every_zone_once(spot):
    r = trainctl(spot, "train", "fr", *QUICK, *EVERY_ZONE_DRY, "--set", "defaults.capacity_wait_minutes=0")
    assert r.returncode == 3, r.stdout + r.stderr
    run_id = _only_run(spot)
    journal = _read(spot, run_id, "metadata/placements.json")
    assert [p["zone"] for p in journal["placements"]] == ["sim-a", "sim-b", "sim-c"]
    assert "no capacity for run" in r.stderr and f"--resume {run_id}" in r.stderr
    _nothing_left(spot)


def test_ctrl_c_while_the_run_waits_for_capacity_leaves_it_resumable_with_its_command(spot):
    import signal
    import threading

    from tests.support.trainctl import start_trainctl, wait_for

    # a market minute per wall minute: the pause between passes lasts 60 s, Ctrl-C comes within it
    proc = start_trainctl(spot, "train", "fr", *QUICK, *EVERY_ZONE_DRY, "--set", "local.spot_market.speedup=1")
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
    reader.start()
    wait_for(lambda: any("trying them again in" in line for line in seen), 120, "the pause between passes")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    out = " ".join("".join(seen).split())
    run_id = _only_run(spot)
    assert proc.returncode == 130, out
    assert f"trainctl train fr --env {ENV} --resume {run_id}" in out and "tear it down" not in out, out
    status = _read(spot, run_id, "status.json")  # not PENDING forever: stopped, and says how to continue
    assert status["state"] == "FAILED" and f"--resume {run_id}" in status["error"]
    _nothing_left(spot)


def test_destroy_while_the_run_waits_for_capacity_stops_it_and_its_follower_applies_nothing_more(spot):
    """Between passes no stack holds the run: `trainctl destroy` still stops it (resumable), and the `train`
    following it ends within a poll of its pause, instead of applying the stack again after destroy said
    nothing runs. No trainer ever starts (every zone dry): seconds of CPU."""
    import threading

    from tests.support.trainctl import start_trainctl, wait_for

    proc = start_trainctl(spot, "train", "fr", *QUICK, *EVERY_ZONE_DRY, "--set", "local.spot_market.speedup=1")
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("trying them again in" in line for line in seen), 120, "the pause between passes")
        run_id = _only_run(spot)
        destroyed = trainctl(spot, "destroy", "fr", "--env", ENV, timeout=120)
        said = destroyed.stdout + destroyed.stderr
        assert destroyed.returncode == 0 and f"run {run_id}: stopped while it waited for a placement" in said, said
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    out = " ".join("".join(seen).split())
    assert proc.returncode == 1 and f"run {run_id} was stopped while it waited for a placement" in out, out
    assert f"--resume {run_id}" in out and "applying" not in out.split("trying them again in")[-1], out
    status = _read(spot, run_id, "status.json")
    assert status["state"] == "FAILED" and f"--resume {run_id}" in status["error"], status
    _nothing_left(spot)


def test_a_run_re_attached_after_its_move_is_moved_again_when_its_zone_runs_dry(spot):
    import signal
    import threading

    from tests.support.trainctl import start_trainctl, wait_for

    # no block: the preempted run waits in sim-b for its group, as it does where no other zone is open
    dry_a = ["--set", "local.spot_market.zones.sim-a.outages=[{start_s: 0}]", "--set", "defaults.zone_block_minutes=0"]
    proc = start_trainctl(spot, "train", "fr", *QUICK, *dry_a)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
    reader.start()
    # moved from sim-a to sim-b, trained there, preempted (sim-b stays dry): Ctrl-C while following
    wait_for(lambda: any("was interrupted in zone sim-b" in line for line in seen), 240, "the preemption in sim-b")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    assert proc.returncode == 130 and "keeps running" in "".join(seen), "".join(seen)
    run_id = _only_run(spot)

    again = trainctl(spot, "train", "fr", *QUICK, *dry_a, timeout=240)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "following it instead" in out and "VM creation failed in sim-b" in out
    assert "moved to zone sim-c (simulated)" in out
    assert _only_run(spot) == run_id and _read(spot, run_id, "status.json")["state"] == "SUCCEEDED"
    placed = [p["zone"] for p in _read(spot, run_id, "metadata/placements.json")["placements"]]
    assert placed == ["sim-a", "sim-b", "sim-c"]
    _nothing_left(spot)


def test_spot_dry_everywhere_takes_the_flex_start_rung_which_waits_its_queue_and_is_never_preempted(spot):
    """capacity [spot, flex_start]: a pass over every dry Spot zone, then flex-start requests: sim-a's queue never
    serves (the run moves on after flex_start_wait_minutes), sim-b's serves after two market minutes; the overlay's
    preemption of the VM in sim-b (classifier epoch 1) is a Spot VM's, so this run trains to the end there."""
    flex = [
        *EVERY_ZONE_DRY,
        "--set",
        "local.spot_market.zones.sim-a.flex_start_wait_s=null",
        "--set",
        "local.spot_market.zones.sim-b.flex_start_wait_s=120",
        "--set",
        "defaults.capacity=[spot, flex_start]",
        "--set",
        "defaults.flex_start_wait_minutes=0.05",
        "--set",
        "defaults.capacity_wait_minutes=10",
    ]
    r = trainctl(spot, "train", "fr", *QUICK, *flex)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    run_id = _only_run(spot)
    status = _read(spot, run_id, "status.json")
    assert status["state"] == "SUCCEEDED" and status["resumed"] == 0  # one VM trained it all: never preempted
    journal = _read(spot, run_id, "metadata/placements.json")
    placed = [(p["zone"], p["rung"], p["outcome"], p.get("ran", False)) for p in journal["placements"]]
    assert placed == [
        ("sim-a", "spot", "no capacity", False),
        ("sim-b", "spot", "no capacity", False),
        ("sim-c", "spot", "no capacity", False),
        ("sim-a", "flex_start", "no capacity", False),
        ("sim-b", "flex_start", "succeeded", True),
    ]
    assert journal["preemptions"] == []
    assert "capacity takes its next rung, flex-start VMs" in out
    assert "flex-start request queued in sim-a since market time" in out  # the queue told, not an error
    log = (_runs(spot) / run_id / "log.txt").read_text()
    assert "flex-start request served in sim-b" in log and "Spot VM in sim-b preempted" not in log
    _nothing_left(spot)
