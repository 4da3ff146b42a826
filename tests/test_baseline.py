"""The TF-IDF baseline every run reports: same rows, same threshold policy, the model's metric shape."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SAMPLE
from trainer.classification.baseline import tfidf_baseline
from trainer.data import parse_labelled_csv, split_rows


@pytest.mark.parametrize("lang, multi", [("fr", True), ("en", False)])
def test_tfidf_baseline_on_the_samples(lang, multi):
    data = parse_labelled_csv((SAMPLE / lang / "train.csv").read_bytes(), text_col="text", label_col="labels",
                              label_sep=";", source=lang)
    assert data.multi_label is multi
    train, valid = split_rows(len(data.texts), 0.2, 42)
    targets = np.array([[int(l in row) for l in data.label_names] for row in data.labels])
    result = tfidf_baseline(data.texts, targets, train_idx=train, valid_idx=valid, multi_label=multi,
                            labels=data.label_names)
    assert set(result["per_label"]) == set(data.label_names)
    assert sum(v["support"] for v in result["per_label"].values()) == int(targets[valid].sum())
    thresholds = [v["threshold"] for v in result["per_label"].values()]
    assert all(t is not None for t in thresholds) if multi else all(t is None for t in thresholds)
    assert result["macro_f1"] > 0.8  # the samples are easy for n-grams: the bar the model must clear
    assert result["fit_s"] >= 0 and "logistic regression" in result["model"]
