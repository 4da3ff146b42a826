"""The kept model: the classifier, or its blend with TF-IDF when that scores better on the validation rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainer.classification import blend

LABELS = ["a", "b", "c"]


def _onehot(idx, k=3):
    out = np.zeros((len(idx), k))
    out[np.arange(len(idx)), idx] = 1
    return out


def _noisy(truth: np.ndarray, right: float, rng) -> np.ndarray:
    """Probabilities that put most mass on the true label for a share `right` of the rows, elsewhere on another."""
    n, k = truth.shape
    probs = rng.uniform(0, 0.2, (n, k))
    true_idx = truth.argmax(axis=1)
    pick = np.where(rng.uniform(size=n) < right, true_idx, (true_idx + 1) % k)
    probs[np.arange(n), pick] += 0.8
    return probs / probs.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("multi", [False, True])
@pytest.mark.parametrize("seed, clf_right, tfidf_right", [(0, 1.0, 0.5), (1, 0.4, 0.95)])
def test_the_weight_follows_the_better_model(multi, seed, clf_right, tfidf_right):
    rng = np.random.default_rng(seed)
    truth = _onehot(rng.integers(0, 3, 80))
    clf, tfidf = _noisy(truth, clf_right, rng), _noisy(truth, tfidf_right, rng)
    choice = blend.choose(clf, tfidf, truth, LABELS, multi_label=multi)
    assert (choice.thresholds is not None) is multi
    assert choice.valid["chosen_on_rows"] == choice.valid["checked_on_rows"] == 40
    assert json.loads(json.dumps(choice.valid)) == choice.valid  # metrics.json takes it as it is
    if clf_right > tfidf_right:  # a good classifier is kept alone
        assert choice.kept == blend.CLASSIFIER and choice.weight == 1.0 and choice.valid["confirmed"]
        assert choice.mix(clf, tfidf) is clf
    else:  # a weak one is blended towards TF-IDF, or left out
        assert choice.kept == blend.BLEND and choice.weight <= 0.5
        assert choice.valid["blend"] < choice.valid["classifier"]  # validation log loss
        np.testing.assert_allclose(choice.mix(clf, tfidf), choice.weight * clf + (1 - choice.weight) * tfidf)


def test_a_weight_that_only_wins_on_the_rows_it_was_chosen_on_is_not_kept():
    """The classifier is right on the even rows (where the weight is chosen) and wrong on the odd ones."""
    rng = np.random.default_rng(2)
    truth = _onehot(rng.integers(0, 3, 60))
    tfidf = _noisy(truth, 0.7, rng)
    clf = np.where((np.arange(60) % 2 == 0)[:, None], _noisy(truth, 1.0, rng), _noisy(truth, 0.0, rng))
    choice = blend.choose(clf, tfidf, truth, LABELS, multi_label=False)
    assert choice.kept == blend.BLEND and choice.weight == 0.0 and not choice.valid["confirmed"]
    assert choice.valid["chosen_weight"] == 1.0  # the even rows wanted the classifier alone
    np.testing.assert_allclose(choice.mix(clf, tfidf), tfidf)
    # the same classifier, right on every row: kept
    good = _noisy(truth, 1.0, rng)
    assert blend.choose(good, tfidf, truth, LABELS, multi_label=False).kept == blend.CLASSIFIER


def test_one_validation_row_cannot_confirm_a_weight():
    truth = _onehot(np.array([1]))
    choice = blend.choose(truth * 0.9 + 0.05, np.full((1, 3), 1 / 3), truth, LABELS, multi_label=False)
    assert choice.weight == 0.0 and choice.valid["checked_on_rows"] == 0 and not choice.valid["confirmed"]


def test_without_tfidf_probabilities_the_classifier_is_kept():
    truth = _onehot(np.array([0, 1, 2, 0]))
    choice = blend.choose(truth, None, truth, LABELS, multi_label=False)
    assert choice.kept == blend.CLASSIFIER and "blend" not in choice.valid


def test_log_loss_of_both_kinds():
    truth = _onehot(np.array([0, 1]))
    assert blend.log_loss(truth * 0.5 + 0.25 * (1 - truth), truth, multi_label=False) == pytest.approx(np.log(2))
    assert blend.log_loss(np.full((2, 3), 0.5), truth, multi_label=True) == pytest.approx(np.log(2))


def test_the_lower_validation_log_loss_decides():
    """Both rank every row right; the classifier is surer of it, so no blend lowers its log loss."""
    truth = _onehot(np.array([0, 1, 2, 0, 1, 2]))
    choice = blend.choose(truth * 0.9 + 0.03, truth * 0.8 + 0.06, truth, LABELS, multi_label=False)
    assert choice.kept == blend.CLASSIFIER


@pytest.mark.parametrize(
    "gains, clear",
    [
        (np.full(30, 0.01), True),  # small, but on every checked row
        (np.tile([0.5, -0.45], 15), False),  # above zero on average, by noise
        (np.array([2.0, *np.full(29, -0.01)]), False),  # one lucky row
        (np.array([0.5]), False),  # one row decides nothing
    ],
)
def test_a_weight_is_kept_only_for_a_clear_gain_on_the_rows_it_was_checked_on(gains, clear):
    assert blend.clear_gain(gains) is clear
