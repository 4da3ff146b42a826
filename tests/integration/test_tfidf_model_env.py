"""A run that kept TF-IDF alone, logged as MLflow saves it, loads and predicts in a fresh virtual environment made
from the model's own requirements.txt and nothing else: no torch, fastai or spaCy installed, no project.

The environment: `python -m venv` (no system site-packages), `pip install -r requirements.txt` (pip's cache and
the machine's pip settings as they are). Skipped, with the reason, where pip cannot reach a package index.
Cost: the install of the ~185 packages mlflow brings: 12 min on 2 busy cores with a cold pip cache, 2.7 min with a
warm one (modules not compiled), so it runs where TRAINSTACK_FRESH_ENV_TESTS=1 is set (skipped, saying so, elsewhere).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.runs import tracked_run
from tests.unit.test_tfidf_served import _tfidf_run
from trainer.storage import open_bucket

mlflow = pytest.importorskip("mlflow", reason="the dev install brings mlflow (pyproject [dev])")

RUN = "20261127-100000-tfid"
# pip's words for an index it could not reach (the run's requirements themselves are not in question then)
UNREACHABLE = re.compile(
    r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
    r"Network is unreachable|Could not fetch URL|ProxyError"
)
PREDICT = """
import importlib.util, json, sys
import mlflow.pyfunc
import pandas as pd
model = mlflow.pyfunc.load_model(sys.argv[1])
out = model.predict(pd.DataFrame({"text": json.loads(sys.argv[2]) + [None]}))
print(json.dumps({"labels": [list(v) for v in out["labels"]], "error": list(out["error"]),
                  "installed": [m for m in ("torch", "fastai", "spacy") if importlib.util.find_spec(m)],
                  "project": [m for m in ("trainer", "stacks") if importlib.util.find_spec(m)]}))
"""


def _saved_tfidf_model(tmp_path: Path) -> tuple[Path, list[str], list[list[str]]]:
    """The model `trainctl runs export` logs for a run that kept TF-IDF alone, saved to a folder."""
    from stacks.tracking.model import pyfunc_model
    from trainer.serving.served_model import ServedModel
    from trainer.stages.upload import package_versions

    root = tmp_path / "bucket"
    tracked_run(root, "fr", RUN)  # the run's other files (trainer.json, ...); its model is TF-IDF's below
    folder = root / "fr" / "runs" / RUN
    (folder / "model.pth").unlink()
    texts = _tfidf_run(folder)
    meta = json.loads((folder / "metadata/trainer.json").read_text())
    (folder / "metadata/trainer.json").write_text(json.dumps({**meta, "packages": package_versions()}))
    with pyfunc_model(open_bucket(f"file://{root}"), "fr", RUN) as arguments:
        mlflow.pyfunc.save_model(str(tmp_path / "model"), **arguments)
    expected, _ = ServedModel.from_folder(folder).predict(texts[:6])
    return tmp_path / "model", texts[:6], expected


@pytest.mark.skipif(
    os.environ.get("TRAINSTACK_FRESH_ENV_TESTS") != "1",
    reason="installs the model's requirements into a new venv (~3 min, 2 cores): set TRAINSTACK_FRESH_ENV_TESTS=1",
)
def test_a_tfidf_model_predicts_in_a_fresh_environment_of_its_own_requirements_without_torch(tmp_path):
    model, texts, expected = _saved_tfidf_model(tmp_path)
    required = (model / "requirements.txt").read_text().split()
    assert not [r for r in required if r.split("==")[0] in ("torch", "fastai", "spacy")], required
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-compile", "-r", str(model / "requirements.txt")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if pip.returncode != 0 and UNREACHABLE.search(pip.stdout + pip.stderr):
        pytest.skip(f"pip could not reach a package index: {(pip.stdout + pip.stderr).strip().splitlines()[-1]}")
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    proc = subprocess.run(
        [str(python), "-I", "-W", "ignore", "-c", PREDICT, str(model), json.dumps(texts)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["installed"] == [] and out["project"] == []  # nothing but the model's requirements
    assert out["labels"] == [*expected, []] and out["error"] == [None] * len(texts) + ["no text (null)"]
