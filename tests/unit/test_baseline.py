"""The TF-IDF baseline every run reports: same rows, same threshold policy, the model's metric shape."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.project import SAMPLE
from trainer.classification.baseline import tfidf_baseline
from trainer.data import parse_labelled_csv
from trainer.splits import make_splits


@pytest.mark.parametrize("lang, multi", [("fr", True), ("en", False)])
def test_tfidf_baseline_on_the_samples(lang, multi):
    data = parse_labelled_csv((SAMPLE / lang / "train.csv").read_bytes(), text_col="text", label_col="labels",
                              label_sep=";", source=lang)
    assert data.multi_label is multi
    s = make_splits(data, valid_pct=0.2, seed=42)
    train, valid = s.train, s.valid
    targets = np.array([[int(l in row) for l in data.label_names] for row in data.labels])
    result = tfidf_baseline(data.texts, targets, train_idx=train, valid_idx=valid, multi_label=multi,
                            labels=data.label_names)
    assert set(result["per_label"]) == set(data.label_names)
    assert sum(v["support"] for v in result["per_label"].values()) == int(targets[valid].sum())
    thresholds = [v["threshold"] for v in result["per_label"].values()]
    assert all(t is not None for t in thresholds) if multi else all(t is None for t in thresholds)
    assert result["macro_f1"] > 0.8  # the samples are easy for n-grams: the bar the model must clear
    assert result["fit_s"] >= 0 and "logistic regression" in result["model"]


def test_recipe_spreads_rates_by_2_6_per_layer_group_for_any_depth():
    from trainer.classification.recipe import classifier_phases, lm_finetune_phases

    for n_layers in (1, 2, 3, 4):
        phases = classifier_phases(2e-2, 6, n_groups=n_layers + 2)
        assert [(f, n) for f, n, _ in phases] == [(-1, 1), (-2, 1), (-3, 1), (None, 3)]
        last = phases[-1][2]
        assert last.stop == pytest.approx(2e-3)
        assert last.stop / last.start == pytest.approx(2.6 ** (n_layers + 1))
    assert [(f, n) for f, n, _ in classifier_phases(2e-2, 2, n_groups=5)] == [(-1, 1), (-2, 1)]
    assert lm_finetune_phases(2e-2, 4) == [(-1, 1, 2e-2), (None, 3, pytest.approx(2e-3))]
    assert lm_finetune_phases(2e-2, 1) == [(-1, 1, 2e-2)]


def test_small_data_gets_enough_classifier_steps():
    from trainer.classification.recipe import MAX_CLF_EPOCHS, classifier_epochs

    assert classifier_epochs(12, batches_per_epoch=4, min_steps=400) == 100  # 120 rows at bs 32
    assert classifier_epochs(12, batches_per_epoch=10, min_steps=400) == 40
    assert classifier_epochs(12, batches_per_epoch=1000, min_steps=400) == 12  # large data: as configured
    assert classifier_epochs(12, batches_per_epoch=1, min_steps=10_000) == MAX_CLF_EPOCHS
    assert classifier_epochs(12, batches_per_epoch=4, min_steps=0) == 12


def test_report_plots(tmp_path):
    from trainer.classification import plots

    labels = ["a", "b", "c"]
    per = {l: {"f1": f} for l, f in zip(labels, (0.5, 0.7, 0.9))}
    result = {"labels": labels, "per_label": per, "macro_f1": 0.7, "rows": {"scores": "test"},
              "baseline_tfidf": {"per_label": per, "macro_f1": 0.7}}
    f1 = plots.per_label_f1(result, tmp_path / "f1.png")
    cm = plots.confusion(np.array([0, 1, 2, 2]), np.array([0, 2, 2, 1]), labels, tmp_path / "cm.png", "test")
    for path in (f1, cm):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
