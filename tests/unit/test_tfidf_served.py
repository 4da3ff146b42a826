"""A run that kept TF-IDF alone, served: from metrics.json and the TF-IDF files, without model.pth or torch;
the MLflow pyfunc's typed rows (labels as lists, probabilities, why a row was not classified); the logged
model's requirements, what its prediction imports at the versions the run trained with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.unit.test_baseline import _toy

ROOT = Path(__file__).resolve().parents[2]


def _tfidf_run(folder: Path, *, weight: float = 0.0) -> list[str]:
    """A run folder that kept a blend weighing the classifier `weight`, no model.pth -> its texts."""
    from trainer.classification.baseline import TfidfSpec, fit_tfidf

    texts, targets, names = _toy(False)
    model = fit_tfidf(
        texts,
        targets,
        train_idx=list(range(40)),
        valid_idx=list(range(40, 60)),
        multi_label=False,
        labels=names,
        spec=TfidfSpec.for_language("fr"),
    )
    folder.mkdir(parents=True, exist_ok=True)
    for name, blob in model.save().items():
        (folder / name).write_bytes(blob)
    figures = {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 10, "threshold": None}
    doc = {
        "run_id": "20261127-100000-tfid",
        "lang": "fr",
        "job": "classifier",
        "labels": names,
        "multi_label": False,
        "macro_f1": 1.0,
        "per_label": {name: figures for name in names},
        "kept": "blend",
        "blend": {"weight": weight, "macro_f1": 1.0, "per_label": {name: figures for name in names}},
    }
    (folder / "metrics.json").write_text(json.dumps(doc))
    return texts


def test_a_run_that_kept_tfidf_alone_is_served_without_its_model_file(tmp_path):
    from trainer.classification.baseline import TfidfModel
    from trainer.serving.served_model import ServedModel, UnservableRun

    texts = _tfidf_run(tmp_path / "run")
    served = ServedModel.from_folder(tmp_path / "run")
    tfidf = TfidfModel.load((tmp_path / "run/tfidf.json").read_bytes(), (tmp_path / "run/tfidf.npz").read_bytes())
    labels, probs = served.predict(texts[:6])
    np.testing.assert_allclose(probs, tfidf.probabilities(texts[:6]))
    assert labels == [["billing"], ["delivery"], ["delivery"]] * 2

    _tfidf_run(tmp_path / "blend", weight=0.4)  # a blend needs its classifier: said, not guessed
    with pytest.raises(UnservableRun, match="no model.pth"):
        ServedModel.from_folder(tmp_path / "blend")


def test_the_pyfunc_types_its_rows_and_says_which_it_could_not_classify(tmp_path):
    """Run in a fresh interpreter: serving a TF-IDF run imports neither torch nor fastai nor spaCy."""
    _tfidf_run(tmp_path / "run")
    script = f"""
import json, sys
import pandas as pd
from trainer.serving.mlflow_pyfunc import TrainstackClassifier
from types import SimpleNamespace
folder = {str(tmp_path / "run")!r}
model = TrainstackClassifier()
files = ("metrics.json", "tfidf.json", "tfidf.npz")
model.load_context(SimpleNamespace(artifacts={{n: f"{{folder}}/{{n}}" for n in files}}))
out = model.predict(None, pd.DataFrame({{"text": ["facture paiement", None, "", 3, "   ", float("nan")]}}))
print(json.dumps({{"labels": [list(v) for v in out["labels"]], "error": list(out["error"]),
                   "prob": [None if v != v else v for v in out["prob_billing"]],
                   "dtype": str(out["prob_billing"].dtype),
                   "heavy": sorted(m for m in ("torch", "fastai", "spacy") if m in sys.modules)}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["labels"] == [["billing"], [], [], [], [], []]
    assert out["error"] == [None, "no text (null)", "empty text", "not text (int)", "empty text", "no text (null)"]
    assert out["prob"][0] > 0.5 and out["prob"][1:] == [None] * 5 and out["dtype"] == "float64"
    assert out["heavy"] == []


def test_the_model_requires_what_its_prediction_imports_at_the_trained_versions():
    import mlflow

    from stacks.tracking.model import requirements, signature

    meta = {
        "torch": "2.5.1+cu124",
        "fastai": "2.8.0",
        "packages": {"numpy": "2.1.0", "pandas": "2.2.3", "scikit-learn": "1.6.1", "scipy": "1.14.1", "spacy": "3.8.2"},
    }
    tfidf = {"kept": "blend", "blend": {"weight": 0.0}}
    assert requirements(meta, tfidf) == [
        f"mlflow=={mlflow.__version__}",
        "numpy==2.1.0",
        "pandas==2.2.3",
        "scikit-learn==1.6.1",
        "scipy==1.14.1",
    ]
    classifier = requirements(meta, {"kept": "classifier", "tokenizer": "fastai-spacy-blank-fr-unicase-v1"})
    assert classifier[-3:] == ["torch==2.5.1", "fastai==2.8.0", "spacy==3.8.2"]
    outputs = {c.name: c.to_dict() for c in signature(["a", "b c"]).outputs.inputs}
    assert outputs["labels"]["type"] == "array" and outputs["labels"]["items"] == {"type": "string"}
    assert outputs["prob_b c"]["type"] == "double" and outputs["error"]["required"] is False


def test_tfidf_features_are_scikit_learns_own_with_each_word_looked_up_once(tmp_path):
    """char_wb counts built word by word from a cache: the same matrix, bit for bit, as the vectorizer's own
    transform (accents, case, runs of spaces, tabs, non-breaking spaces, empty texts, words longer than n),
    and still with a cache too small for the file (it starts again)."""
    from scipy.sparse import hstack

    from trainer.classification.baseline import TfidfModel, WordNgramCounts

    texts = _tfidf_run(tmp_path / "run")
    model = TfidfModel.load((tmp_path / "run/tfidf.json").read_bytes(), (tmp_path / "run/tfidf.npz").read_bytes())
    odd = ["", "  É ÉTÉ  été\tÉtÉ\n x", "Ça coûte 12,50 € !!", "a", "l'été—été...", "\u00a0nbsp\u2003em", "x" * 40]
    rows = [t.strip() for t in [*texts, *odd, *texts]]
    own = hstack([v.transform(rows) for v in model.vectorizers]).tocsr()
    ours = model.features(rows)
    assert any(v.analyzer == "char_wb" for v in model.vectorizers) and model.word_counts
    for a, b in ((own, ours), (own, model.features(rows))):  # the second call from the cache
        assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
        assert np.array_equal(a.data, b.data) and a.dtype == b.dtype
    [char] = [v for v in model.vectorizers if v.analyzer == "char_wb"]
    small = WordNgramCounts(char, limit=3)
    assert (small.transform(rows) != char.transform(rows)).nnz == 0 and len(small.ids) <= 3
