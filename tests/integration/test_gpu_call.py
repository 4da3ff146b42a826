"""The GPU call (benchmarks/gpu_call.py) as a dry run on the CPU: every step of the call a GPU machine will get,
at tiny sizes, so the one prepared call cannot fail on a typo when a GPU is finally at hand."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.support.project import REPO


def test_the_gpu_call_dry_run_writes_every_step(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "benchmarks.gpu_call", "--out", str(out), "--dry-run",
                        "--budget-s", "400"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads((out / "gpu_call.json").read_text())
    steps = record["steps"]
    assert record["dry_run"] and record["finished"] and set(steps) == {"env", "e2e", "speed", "imdb"}
    assert not [name for name, step in steps.items() if "error" in step and step["error"]], steps
    assert steps["env"]["torch"] and "cuda_available" in steps["env"]
    e2e = steps["e2e"]
    assert e2e["rc"] == 0 and e2e["state"] == "SUCCEEDED" and e2e["epochs"] and e2e["precision"]
    assert (out / "e2e" / "metrics.json").is_file() and (out / "e2e" / "log.txt").is_file()
    rows = steps["speed"]["rows"]
    assert {(row["head"], row["precision"]) for row in rows} >= {("full", "fp32"), ("adaptive", "fp32")}
    assert all(row.get("tokens_per_s", 0) > 0 for row in rows if row["precision"] == "fp32")
    imdb = steps["imdb"]
    if "skipped" in imdb:  # a clone without the workspace's shared/ folder: the step says why
        assert "shared" in imdb["skipped"]
    else:
        assert imdb["rc"] == 0 and imdb["variants"] == ["tfidf"] and imdb["cells"]


def test_the_gpu_calls_trainer_alone_where_terraform_is_not(tmp_path):
    """The device machine has no Terraform nor CDK packages: its e2e step runs `python -m trainer` itself."""
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "benchmarks.gpu_call", "--out", str(out), "--dry-run",
                        "--trainer-only", "--steps", "env", "e2e", "--budget-s", "300"], cwd=REPO,
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    steps = json.loads((out / "gpu_call.json").read_text())["steps"]
    assert set(steps) == {"env", "e2e"}
    e2e = steps["e2e"]
    assert e2e["how"] == "python -m trainer" and e2e["rc"] == 0 and e2e["state"] == "SUCCEEDED", e2e
