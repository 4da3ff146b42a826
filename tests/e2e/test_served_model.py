"""Models exported from two trees, served side by side in one fresh interpreter, each by its own code.

The run is the session's (tests/e2e/conftest.py `trained_fr`). One model is saved from a copy of this
repository's `trainer`, the other from a copy whose ServedModel marks every row's labels: a process that ran
one tree's code for both (MLflow's "Limitation of code_paths") gives both the same labels.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest

import trainer
from tests.support.fresh_python import load_in_a_fresh_interpreter
from tests.support.project import SAMPLE
from tests.support.trainctl import run_dir

mlflow = pytest.importorskip("mlflow")

MARK = "from-tree-b"
ALTERATION = f"""

_unaltered_predict = ServedModel.predict


def _marked_predict(self, texts):  # the test's alteration: which tree's code ran shows in the labels
    labels, probs = _unaltered_predict(self, texts)
    return [[*row, {MARK!r}] for row in labels], probs


ServedModel.predict = _marked_predict
"""


@pytest.fixture(scope="module")
def two_trees(tmp_path_factory, trained_fr):
    """(the run's folder, texts, [model folder of tree A, of tree B]): both saved from the same run."""
    from stacks.tracking.model import pyfunc_model
    from trainer.storage import open_bucket

    project, run_id, _ = trained_fr
    folder = run_dir(project, "fr", run_id)
    bucket = open_bucket(f"file://{folder.parents[2]}")
    tmp = tmp_path_factory.mktemp("trees")
    models = []
    for tree in ("a", "b"):
        code = shutil.copytree(
            Path(trainer.__file__).parent, tmp / tree / "trainer", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        if tree == "b":
            served = code / "serving" / "served_model.py"
            served.write_text(served.read_text() + ALTERATION)
        with pyfunc_model(bucket, "fr", run_id, code_source=code) as arguments:
            mlflow.pyfunc.save_model(str(tmp / f"model-{tree}"), **arguments)
        models.append(tmp / f"model-{tree}")
    texts = [row["text"] for row in csv.DictReader(open(SAMPLE / "fr" / "train.csv", encoding="utf-8"))][:8]
    return folder, texts, models


def test_two_trees_models_load_side_by_side_each_running_its_own_code(two_trees, tmp_path):
    from trainer.serving.served_model import ServedModel

    folder, texts, models = two_trees
    a, b, imported = load_in_a_fresh_interpreter([str(m) for m in models], texts, cwd=tmp_path)
    expected_labels, expected_probs = ServedModel.from_folder(folder).predict(texts)  # what trainctl serves
    assert a["labels"] == expected_labels and b["labels"] == [[*row, MARK] for row in expected_labels]
    np.testing.assert_allclose(a["probs"], expected_probs, atol=1e-6)
    np.testing.assert_allclose(b["probs"], expected_probs, atol=1e-6)
    packages = {mlflow.models.Model.load(str(m)).metadata["trainstack.code_package"] for m in models}
    assert len(packages) == 2 and set(imported) == packages  # never `trainer` itself
    assert {a["code"], b["code"]} == {f"{p}.serving.served_model" for p in packages}


def test_the_run_kept_the_code_it_trained_with(trained_fr):
    from trainer.runfiles.code_archive import archive_code

    project, run_id, _ = trained_fr
    kept = (run_dir(project, "fr", run_id) / "code" / "trainer.zip").read_bytes()
    assert kept == archive_code(Path(trainer.__file__).parent)  # this tree trained it: the same bytes
