"""The operator CLI works without the trainer extra: a plan job installs `.[cli]` only (no torch).

Runs trainctl in a subprocess where importing torch, fastai, spaCy, sentencepiece or numpy
fails, as in a `pip install '.[cli]'` environment.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.support.project import SAMPLE, make_project

BLOCKED = ("torch", "fastai", "spacy", "sentencepiece", "numpy", "pandas", "sklearn")
SCRIPT = f"""
import sys
for name in {BLOCKED!r}:
    sys.modules[name] = None  # `import name` raises ImportError, as when the package is absent
from stacks.cli.main import run
sys.argv = ["trainctl", *sys.argv[1:]]
run()
"""


def trainctl(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], cwd=project, capture_output=True, text=True, timeout=300
    )


@pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not on PATH")
def test_plan_push_and_runs_need_no_trainer_packages(tmp_path):
    project = make_project(tmp_path / "proj")
    done = trainctl(project, "plan", "--env", "local", "--json-out", str(tmp_path / "plan.json"))
    assert done.returncode == 4, done.stdout + done.stderr  # changes present: both stacks would be created
    assert (tmp_path / "plan.json").is_file()
    done = trainctl(project, "data", "push", "fr", str(SAMPLE / "fr"))
    assert done.returncode == 0, done.stdout + done.stderr
    done = trainctl(project, "runs", "--env", "local")
    assert done.returncode in (0, 2), done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
