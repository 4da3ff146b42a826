"""The trainer as a subprocess (python -m trainer) on the sample data, and waits on its status.json."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.support.project import SAMPLE, TINY_TRAINER_ARGS


def stage_sample(bucket, lang="fr"):
    for path in (SAMPLE / lang).rglob("*"):
        if path.is_file() and path.suffix in (".csv", ".txt"):
            bucket.upload(path, f"{lang}/data/{path.relative_to(SAMPLE / lang).as_posix()}")


def trainer(uri: str, run_id: str, *extra: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer",
            "--lang",
            "fr",
            "--bucket",
            uri,
            "--run-id",
            run_id,
            *TINY_TRAINER_ARGS,
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def wait_status(bucket, run_id: str, predicate, proc, timeout: float = 600) -> dict:
    """The run's status once `predicate` holds. The timeout only guards against a hang: it is set for a
    machine busy with other training (the suite must pass beside one), not for the expected time."""
    key = f"fr/runs/{run_id}/status.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if bucket.exists(key):
            status = json.loads(bucket.read_bytes(key))
            if predicate(status):
                return status
        if proc.poll() is not None:
            pytest.fail(f"trainer exited early with {proc.returncode}: {proc.stdout.read()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the trainer never reached the awaited state")


def sigterm_at(bucket, run_id: str, proc, stage: str, epoch: int) -> None:
    """SIGTERM to `proc` once status.json shows `stage` at `epoch` or later; it exits 143 (resumable)."""
    wait_status(bucket, run_id, lambda s: s["stage"] == stage and s["epoch"] >= epoch, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
