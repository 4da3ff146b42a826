"""The failover rule (stacks.runs.failover) and the simulated market (trainer.launchers.market), alone."""

from __future__ import annotations

import pytest

from stacks.runs.failover import Failover, RunJournal
from trainer.launchers.market import Market, Preemption
from trainer.runfiles.status_file import INTERRUPTED_STAGE, RUNNING, SUCCEEDED, RunStatus
from trainer.storage import open_bucket


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_failover_tries_each_placement_then_backs_off_then_gives_up():
    clock = Clock()
    said = []
    f = Failover(["a", "b", "c"], wait_limit_s=1000, backoff_s=(60, 300), sleep=clock.sleep, clock=clock)
    order = []
    while len(order) < 30 and (not order or order[-1] is not None):
        clock.now += 100  # each placement fails after creation_error_minutes
        order.append(f.next_placement(100, said.append))
    # a failed first; b, c, then a pause, a again ...
    assert order[:4] == ["b", "c", "a", "b"] and clock.slept[:2] == [60, 120]
    assert said[0].startswith("no capacity in any of 3 placement(s)")
    assert order[-1] is None, "waiting never ended"
    assert 1000 <= f.waited_s() < 1000 + 100, "gave up long after capacity_wait_minutes, or before"


def test_a_vm_that_came_resets_the_wait():
    clock = Clock()
    f = Failover(["a", "b"], wait_limit_s=300, backoff_s=(60, 300), sleep=clock.sleep, clock=clock)
    clock.now = 200
    assert f.next_placement(200, lambda m: None) == "b"
    f.vm_came()
    clock.now = 10_000
    assert f.next_placement(100, lambda m: None) == "a"  # a new stretch without a VM, its own clock
    assert f.waited_s() == 100


def test_market_capacity_windows_and_preemption_outages():
    m = Market({"a": [(0.0, 100.0)], "b": []}, (Preemption("b", stage="classifier", epoch=1, outage_s=50),), 1.0, 0.0)
    assert not m.has_capacity("a", 10, {}) and m.has_capacity("a", 100, {}) and not m.has_capacity("z", 0, {})
    fired = {m.preemptions[0].key: 200.0}
    assert not m.has_capacity("b", 220, fired) and m.has_capacity("b", 250, fired)


def test_a_preemption_after_a_stage_shorter_than_a_poll_is_still_due():
    p = Preemption("b", stage="classifier", epoch=1)
    log = [
        "2026-11-27T10:00:00Z == stage classifier (2 epochs)",
        "2026-11-27T10:00:01Z classifier [1/2] epoch 1/2  train_loss 0.5",
        "2026-11-27T10:00:01Z == stage evaluating",
    ]
    assert p.due(0, log[:2]) and p.due(0, [log[0], log[2]])  # its epoch, or a later stage's start
    assert not p.due(0, []) and not p.due(0, log[:1])
    assert not p.due(0, log[1:2])  # an epoch line without its stage's start: an earlier VM's stage
    assert not Preemption("b", stage="lm_finetune", epoch=1).due(0, log)
    assert Preemption("b", stage="classifier", epoch=0).due(0, log[:1])  # the stage's start


def test_a_preemption_at_a_batch_waits_for_that_batch_of_the_next_epoch_by_its_progress_lines():
    p = Preemption("b", stage="lm_finetune", epoch=1, batch=7)
    log = [
        "2026-11-27T10:00:00Z == stage lm_finetune (3 epochs)",
        "2026-11-27T10:00:01Z lm_finetune epoch 1/3: batch 9/15 (60%), 900 tokens/s, epoch ETA 1s",
        "2026-11-27T10:00:02Z lm_finetune [1/2] epoch 1/3  train_loss 5.1",
        "2026-11-27T10:00:03Z lm_finetune epoch 2/3: batch 6/15 (40%), 900 tokens/s, epoch ETA 1s",
        "2026-11-27T10:00:03Z lm_finetune epoch 2/3: batch 7/15 (47%), 900 tokens/s, epoch ETA 1s",
    ]
    assert not p.due(0, log[:4])  # epoch 1 done, 6 batches of epoch 2: not yet
    assert p.due(0, log)
    assert p.due(0, [*log[:3], "2026-11-27T10:00:04Z lm_finetune [2/2] epoch 2/3  train_loss 4.9"])  # epoch 2 done
    assert not Preemption("b", stage="lm_finetune", epoch=0, batch=3).due(0, log[:1])  # not at the stage's start
    assert p.key == "b@lm_finetune:1+7" and Preemption("b", stage="lm_finetune", epoch=1).key == "b@lm_finetune:1"


@pytest.mark.parametrize("notice_s, code", [(None, 143), (0, -9)], ids=["notice", "no-notice"])
def test_a_preempted_local_vm_gets_sigterm_within_its_notice_or_without_one_sigkill_at_once(tmp_path, notice_s, code):
    import subprocess
    import sys
    from types import SimpleNamespace

    from trainer.launchers.local.spot_vm import SpotVm

    trainer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
            "print('ready', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert trainer.stdout.readline() == "ready\n"
    market = Market({"a": []}, (), 1.0, 0.0, notice_s=notice_s)
    args = SimpleNamespace(bucket=f"file://{tmp_path / 'bucket'}", lang="fr", run_id="r1")
    SpotVm(market, "a", tmp_path, args).preempt(trainer)
    assert trainer.wait(timeout=10) == code


def test_a_moved_run_bills_each_vm_until_its_placement_ended_in_its_own_region():
    from datetime import datetime, timezone

    from stacks.targets.gcp.cost import billed_vm_seconds

    records = [
        {"name": "dev-train-fr-a1", "zone": "europe-west4-a", "booted_at": "20261127T100000Z"},
        {"name": "dev-train-fr-a1", "zone": "europe-west4-a", "booted_at": "20261127T103000Z"},  # preempted
        {"name": "dev-train-fr-b7", "zone": "europe-west1-b", "booted_at": "20261127T111000Z"},
    ]
    placements = [
        {"zone": "europe-west4-a", "applied_at": "2026-11-27T09:58:00+00:00", "ended_at": "2026-11-27T11:00:00+00:00"},
        {"zone": "europe-west1-b", "applied_at": "2026-11-27T11:01:00+00:00", "ended_at": None},
    ]
    end = datetime(2026, 11, 27, 13, 0, tzinfo=timezone.utc)
    assert billed_vm_seconds(records, end, placements) == {"europe-west4": 3600.0, "europe-west1": 6600.0}
    # without the record of the move, the first VM would be billed until the run's end
    assert billed_vm_seconds(records, end)["europe-west4"] == 3 * 3600.0


def test_a_run_that_ended_between_two_reads_still_ran_where_it_was_placed(tmp_path):
    """A fast trainer can go from interrupted (or never seen) to SUCCEEDED between two status reads: the VM
    that wrote SUCCEEDED trained, so the placement ran and the preemption's lost time is closed."""
    journal = RunJournal(open_bucket(f"file://{tmp_path}"), "fr", "r1")
    journal.placed({"zone": "b"})
    status = RunStatus(run_id="r1", lang="fr", env="gcp")
    assert journal.observe(RunStatus(**{**vars(status), "state": SUCCEEDED, "stage": "done"})) == "started"
    assert journal.data["placements"][-1]["ran"] is True

    journal.placed({"zone": "c"})
    assert journal.observe(RunStatus(**{**vars(status), "state": RUNNING, "stage": INTERRUPTED_STAGE})) == "preempted"
    assert journal.observe(RunStatus(**{**vars(status), "state": SUCCEEDED, "stage": "done"})) == "training"
    [preemption] = journal.data["preemptions"]
    assert preemption["training_again_at"] and preemption["lost_s"] is not None
    assert journal.data["placements"][-1]["ran"] is True


def test_a_run_first_read_interrupted_after_its_placement_was_applied_was_preempted_there(tmp_path):
    """A short stage and a slow poll: the follower's first read already finds the run interrupted. Written after the
    placement was applied, that is a preemption there (the zone's block and its history need it); written before
    (a resumed run's status, refreshed before its apply), or already held open by the journal, it is not."""
    from datetime import datetime, timedelta, timezone

    def at(seconds: float) -> str:
        return (datetime.now(timezone.utc) + timedelta(seconds=seconds)).isoformat(timespec="seconds")

    def interrupted(updated_at: str) -> RunStatus:
        said = "preempted: checkpoint saved at epoch 1 batch 3 (classifier phase 1)"
        return RunStatus(
            run_id="r1", lang="fr", env="gcp", state=RUNNING, stage=INTERRUPTED_STAGE, updated_at=updated_at, error=said
        )

    bucket = open_bucket(f"file://{tmp_path}")
    journal = RunJournal(bucket, "fr", "r1")
    journal.placed({"zone": "b"})
    assert journal.observe(interrupted(at(5))) == "preempted"
    assert journal.data["preemptions"][-1]["zone"] == "b" and journal.data["placements"][-1]["ran"] is True
    assert journal.data["preemptions"][-1]["cause"] == "preempted"  # the trainer said so: it blocks the zone
    training = RunStatus(run_id="r1", lang="fr", env="gcp", state=SUCCEEDED, stage="done", updated_at=at(20))
    assert journal.observe(training) == "training"  # the preemption is closed: the run trained again
    assert journal.data["preemptions"][-1]["training_again_at"] is not None

    again = RunJournal(bucket, "fr", "r1")  # a follower attached later: the preemption already held, open
    again.data["preemptions"][-1]["training_again_at"] = None
    assert again.observe(interrupted(at(10))) is None and len(again.data["preemptions"]) == 1

    resumed = RunJournal(open_bucket(f"file://{tmp_path / 'other'}"), "fr", "r1")
    resumed.placed({"zone": "c"})
    assert resumed.observe(interrupted(at(-60))) is None and resumed.data["preemptions"] == []


def test_an_interruption_by_a_crashed_peer_is_recorded_but_not_as_the_zones_preemption(tmp_path):
    """A rank that lost its peer stops as interrupted with no word of a preemption: recorded (the run's lost time),
    never a block of its zone nor a preemption in the zone's history."""
    from datetime import datetime, timedelta, timezone

    from stacks.runs.zone_history import ZoneHistory
    from stacks.runs.zone_ranking import zone_blocks

    journal = RunJournal(open_bucket(f"file://{tmp_path}"), "fr", "r1")
    journal.placed({"zone": "b", "spot": True, "rung": "spot"})
    running = RunStatus(run_id="r1", lang="fr", env="gcp", state=RUNNING, stage="classifier")
    assert journal.observe(running) == "started"
    assert journal.observe(RunStatus(**{**vars(running), "stage": INTERRUPTED_STAGE})) == "preempted"
    assert journal.data["preemptions"][-1]["cause"] == "interrupted"
    assert zone_blocks(journal.data, 60) == {}
    now = datetime.now(timezone.utc)
    history = ZoneHistory("fr", 30)
    history.add_run("r1", journal.data, None, now - timedelta(days=30), now + timedelta(hours=1))
    assert history.of_zone("b").preemptions == 0
    journal.data["preemptions"][-1]["cause"] = "preempted"  # as a preemption it would count, and block
    history = ZoneHistory("fr", 30)
    history.add_run("r1", journal.data, None, now - timedelta(days=30), now + timedelta(hours=1))
    assert history.of_zone("b").preemptions == 1 and "b" in zone_blocks(journal.data, 60)
