"""The TF-IDF baseline every run reports: same rows, same threshold policy, the model's metric shape."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.project import SAMPLE
from trainer.classification.baseline import tfidf_baseline
from trainer.data.labelled import parse_labelled_csv
from trainer.data.splits import make_splits


@pytest.mark.parametrize("lang, multi", [("fr", True), ("en", False)])
def test_tfidf_baseline_on_the_samples(lang, multi):
    data = parse_labelled_csv(
        (SAMPLE / lang / "train.csv").read_bytes(), text_col="text", label_col="labels", label_sep=";", source=lang
    )
    assert data.multi_label is multi
    s = make_splits(data, valid_pct=0.2, seed=42)
    train, valid = s.train, s.valid
    targets = np.array([[int(l in row) for l in data.label_names] for row in data.labels])
    result = tfidf_baseline(
        data.texts, targets, train_idx=train, valid_idx=valid, multi_label=multi, labels=data.label_names
    )
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
    # a head that starts from the linear probe skips the head-only epoch; the epochs stay the same
    fitted = classifier_phases(2e-2, 6, n_groups=4, head_fitted=True)
    assert [(f, n) for f, n, _ in fitted] == [(-2, 1), (-3, 1), (None, 4)]
    assert fitted[0][2].stop == pytest.approx(1e-2) and fitted[-1][2].stop == pytest.approx(2e-3)
    assert lm_finetune_phases(2e-2, 4) == [(-1, 1, 2e-2), (None, 3, pytest.approx(2e-3))]
    # one epoch trains every layer: frozen alone, the LSTMs never saw the domain (IMDb's 12M-token run)
    assert lm_finetune_phases(2e-2, 1) == [(None, 1, pytest.approx(2e-3))]


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
    result = {
        "labels": labels,
        "per_label": per,
        "macro_f1": 0.7,
        "rows": {"scores": "test"},
        "baseline_tfidf": {"per_label": per, "macro_f1": 0.7},
    }
    f1 = plots.per_label_f1(result, tmp_path / "f1.png")
    cm = plots.confusion(np.array([0, 1, 2, 2]), np.array([0, 2, 2, 1]), labels, tmp_path / "cm.png", "test")
    for path in (f1, cm):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _toy(multi: bool):
    """Two easy labels by vocabulary (and a third for multi-label rows), 60 rows."""
    texts, labels = [], []
    for i in range(60):
        if i % 3 == 0:
            texts.append(f"facture paiement remboursement montant {i}")
            labels.append(["billing"])
        elif i % 3 == 1:
            texts.append(f"colis livraison retard transporteur {i}")
            labels.append(["delivery"])
        else:
            texts.append(f"colis facture livraison paiement {i}")
            labels.append(["billing", "delivery"] if multi else ["delivery"])
    names = ["billing", "delivery"]
    return texts, np.array([[int(n in ls) for n in names] for ls in labels]), names


@pytest.mark.parametrize("multi", [True, False])
def test_fitted_tfidf_round_trips_through_arrays_without_pickle(multi):
    import io
    import json

    from trainer.classification.baseline import DEFAULT_C, TfidfModel, TfidfSpec, fit_tfidf

    texts, targets, names = _toy(multi)
    model = fit_tfidf(
        texts,
        targets,
        train_idx=list(range(40)),
        valid_idx=list(range(40, 60)),
        multi_label=multi,
        labels=names,
        spec=TfidfSpec.for_language("fr"),
    )
    assert model.c == DEFAULT_C  # 20 validation rows: too few to choose C on
    files = model.save()
    assert set(files) == {"tfidf.json", "tfidf.npz"}
    arrays = np.load(io.BytesIO(files["tfidf.npz"]), allow_pickle=False)  # plain numbers: nothing to unpickle
    assert all(arrays[k].dtype != object for k in arrays.files)
    loaded = TfidfModel.load(files["tfidf.json"], files["tfidf.npz"])
    new = ["une facture et un paiement", "le colis est en retard", "rien à voir"]
    np.testing.assert_allclose(loaded.probabilities(new), model.probabilities(new), atol=1e-5)
    probs = loaded.probabilities(new)
    assert probs[0].argmax() == 0 and probs[1].argmax() == 1
    if not multi:
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    assert (loaded.thresholds is not None) is multi
    spec = json.loads(files["tfidf.json"])
    with pytest.raises(ValueError, match="unknown format"):
        TfidfModel.load(json.dumps({**spec, "format": "other/9"}).encode(), files["tfidf.npz"])


def test_unsegmented_scripts_get_character_ngrams_and_every_baseline_is_class_weighted():
    from trainer.classification.baseline import TfidfSpec

    ja, fr, legacy = TfidfSpec.for_language("ja"), TfidfSpec.for_language("fr"), TfidfSpec.legacy()
    assert [v.analyzer for v in ja.vectorizers()] == ["char"] and ja.vectorizers()[0].ngram_range == (1, 3)
    assert [v.analyzer for v in fr.vectorizers()] == ["word", "char_wb"]
    assert ja.class_weight == fr.class_weight == "balanced" and legacy.class_weight is None
    assert "no spaces between words" in ja.describe() and "class-weighted" in fr.describe()


def test_c_is_chosen_on_validation_only_with_enough_rows():
    from trainer.classification import baseline as B

    texts, targets, names = _toy(False)
    texts, targets = texts * 10, np.vstack([targets] * 10)  # 600 rows
    idx = list(range(len(texts)))
    chosen = B.fit_tfidf(
        texts,
        targets,
        train_idx=idx[:60],
        valid_idx=idx[60:],
        multi_label=False,
        labels=names,
        spec=B.TfidfSpec(fixed_c=5.0),
    )  # 540 validation rows: C comes from the grid, not fixed_c
    assert chosen.c in B.C_GRID and chosen.c != 5.0
    few = B.fit_tfidf(
        texts,
        targets,
        train_idx=idx[:60],
        valid_idx=idx[60:80],
        multi_label=False,
        labels=names,
        spec=B.TfidfSpec(fixed_c=3.0),
    )
    assert few.c == 3.0


def test_class_weights_against_imbalance():
    from trainer.classification.recipe import label_weights

    targets = [[1, 0]] * 9 + [[0, 1]]  # 9:1
    assert label_weights(targets, multi_label=False, how="none") is None
    single = label_weights(targets, multi_label=False, how="balanced")
    assert single[1] / single[0] == pytest.approx(9.0) and 0.9 * single[0] + 0.1 * single[1] == pytest.approx(1.0)
    assert label_weights(targets, multi_label=False, how="sqrt")[1] / label_weights(
        targets, multi_label=False, how="sqrt"
    )[0] == pytest.approx(3.0)
    multi = label_weights(targets, multi_label=True, how="sqrt")  # pos_weight: (negatives / positives) ** 0.5
    assert multi.tolist() == pytest.approx([(1 / 9) ** 0.5, 3.0])
