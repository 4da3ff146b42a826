"""The trainer on its own: gs:// through the emulator, determinism, resume after SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import SAMPLE, TINY_TRAINER_ARGS
from trainer.storage import open_bucket

pytestmark = pytest.mark.e2e


def stage_sample(bucket, lang="fr"):
    for path in (SAMPLE / lang).rglob("*"):
        if path.is_file() and path.suffix in (".csv", ".txt"):
            bucket.upload(path, f"{lang}/data/{path.relative_to(SAMPLE / lang).as_posix()}")


def trainer(uri: str, run_id: str, *extra: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainer", "--lang", "fr", "--bucket", uri, "--run-id", run_id,
                             *TINY_TRAINER_ARGS, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **popen)


def test_trainer_on_gcs_bucket_and_same_seed_same_metrics(gcs_env, tmp_path):
    uri = f"gs://test-bucket/{tmp_path.name}"
    bucket = open_bucket(uri)
    stage_sample(bucket)
    for run_id in ("a", "b"):
        proc = trainer(uri, run_id)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
    metrics = [json.loads(bucket.read_bytes(f"fr/runs/{r}/metrics.json")) for r in ("a", "b")]
    keys = ("per_label", "micro_f1", "macro_f1", "accuracy")
    assert {k: metrics[0][k] for k in keys} == {k: metrics[1][k] for k in keys}
    # Run b reused what run a left: the base LM and the token cache.
    log_b = bucket.read_bytes("fr/runs/b/log.txt").decode()
    assert "base LM: reused" in log_b and "tokens: reused cache" in log_b
    assert json.loads(bucket.read_bytes("fr/runs/b/status.json"))["state"] == "SUCCEEDED"
    # A finished run is never overwritten.
    proc = trainer(uri, "a")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "already ended" in out


def test_sigterm_checkpoints_and_same_run_id_resumes(tmp_path):
    uri = f"file://{tmp_path / 'bucket'}"
    bucket = open_bucket(uri)
    stage_sample(bucket)
    status_key = "fr/runs/r1/status.json"
    proc = trainer(uri, "r1", "--epochs-clf", "30", start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if bucket.exists(status_key):
            s = json.loads(bucket.read_bytes(status_key))
            if s["stage"] == "classifier" and s["epoch"] >= 4:
                break
        time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("classifier never reached epoch 4")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    status = json.loads(bucket.read_bytes(status_key))
    assert status["state"] == "RUNNING" and status["stage"] == "interrupted"
    assert json.loads(bucket.read_bytes("fr/runs/r1/checkpoints/classifier.ckpt.json"))["phase"] == 3
    proc = trainer(uri, "r1", "--epochs-clf", "30")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    status = json.loads(bucket.read_bytes(status_key))
    assert status["state"] == "SUCCEEDED" and status["resumed"] == 1
    log = bucket.read_bytes("fr/runs/r1/log.txt").decode()
    assert "lm_finetune: finished before the interruption" in log
    assert "classifier: resumed at phase 4" in log
    history = json.loads(bucket.read_bytes("fr/runs/r1/metrics.json"))["history"]
    assert history[-1]["stage"] == "classifier" and history[-1]["epoch"] == 30
