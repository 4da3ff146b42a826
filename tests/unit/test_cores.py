"""Local runs never share cores: claims, the queue, and what a queued run says."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

from trainer.launchers.local import supervisor
from trainer.launchers.local.cores import CoreLedger, describe, share
from trainer.runfiles.status_file import PENDING, QUEUED, read_status
from trainer.storage import LocalBucket


def test_claims_are_disjoint_and_a_full_machine_queues(tmp_path):
    ledger = CoreLedger(tmp_path, cores=[0, 1, 2, 3])
    me = os.getpid()
    assert ledger.claim("run-a", 2, pid=me) == [0, 1]
    assert ledger.claim("run-b", 2, pid=me) == [2, 3]
    assert ledger.claim("run-c", 1, pid=me) is None  # everything held: wait
    assert ledger.claim("run-a", 2, pid=me) == [0, 1]  # asking again keeps the same cores
    ledger.release("run-a")
    assert ledger.claim("run-c", 0, pid=me) is None  # all four wanted, two free
    assert ledger.claim("run-c", 1, pid=me) == [0]
    assert [c.run_id for c in ledger.holders()] == ["run-b", "run-c"]


def test_a_dead_holder_frees_its_cores(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ledger = CoreLedger(tmp_path, cores=[0, 1])
    assert ledger.claim("gone", 0, pid=dead.pid) == [0, 1]
    assert ledger.claim("next", 0, pid=os.getpid()) == [0, 1]


def test_share_and_describe():
    assert share(2, total=2) == 1 and share(3, total=2) == 1 and share(2, total=16) == 8
    assert describe([0, 1, 2, 3]) == "0-3" and describe([0, 2]) == "0,2" and describe([5]) == "5"


def test_a_queued_run_says_for_whom_and_stops_when_cancelled(tmp_path):
    ledger = CoreLedger(tmp_path / "cores", cores=[0, 1])
    ledger.claim("20260101-100000-aaaa", 0, pid=os.getpid(), label="es run 20260101-100000-aaaa")
    bucket_root = tmp_path / "bucket"
    args = SimpleNamespace(
        lang="fr", run_id="20260102-100000-bbbb", env="local", job="classifier", bucket=f"file://{bucket_root}"
    )
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    stopping = {"signal": False, "child": None}
    log_file = bucket_root / "fr/runs/20260102-100000-bbbb/log.txt"

    def cancel_once_queued():  # an event, not a time: the queued line is written, then the run is cancelled
        while not (log_file.exists() and "queued" in log_file.read_text()):
            time.sleep(0.02)
        (state_dir / supervisor.CANCEL_FILE).touch()

    threading.Thread(target=cancel_once_queued, daemon=True).start()
    assert supervisor._wait_for_cores(ledger, 1, args, stopping, state_dir, deadline=float("inf")) is None
    status = read_status(LocalBucket(bucket_root), "fr", args.run_id)
    assert status.state == PENDING and status.stage == QUEUED
    log = log_file.read_text()
    assert "queued: waiting for 1 of this machine's 2 cores, held by es run 20260101-100000-aaaa (cores 0-1)" in log
    ledger.release("20260101-100000-aaaa")
    assert supervisor._wait_for_cores(
        ledger, 1, args, {"signal": False}, state_dir.parent / "other", deadline=float("inf")
    ) == [0]


def test_a_reused_pid_is_not_the_holder(tmp_path):
    import json

    ledger = CoreLedger(tmp_path, cores=[0, 1])
    # a claim left by a process that died, whose pid now belongs to another process (this one)
    (tmp_path / "old.json").write_text(
        json.dumps({"run_id": "old", "pid": os.getpid(), "cores": [0, 1], "started": "1"})
    )
    assert ledger.claim("new", 0, pid=os.getpid()) == [0, 1]
