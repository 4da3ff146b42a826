"""The kept model: the classifier, or its blend with TF-IDF when that scores better on the validation rows."""
from __future__ import annotations

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
def test_a_good_classifier_is_kept_alone(multi):
    rng = np.random.default_rng(0)
    truth = _onehot(rng.integers(0, 3, 60))
    clf, tfidf = _noisy(truth, 1.0, rng), _noisy(truth, 0.5, rng)
    choice = blend.choose(clf, tfidf, truth, LABELS, multi_label=multi)
    assert choice.kept == blend.CLASSIFIER and choice.weight == 1.0
    assert choice.mix(clf, tfidf) is clf
    assert (choice.thresholds is not None) is multi


@pytest.mark.parametrize("multi", [False, True])
def test_a_weak_classifier_is_blended_towards_tfidf(multi):
    rng = np.random.default_rng(1)
    truth = _onehot(rng.integers(0, 3, 80))
    clf, tfidf = _noisy(truth, 0.4, rng), _noisy(truth, 0.95, rng)
    choice = blend.choose(clf, tfidf, truth, LABELS, multi_label=multi)
    assert choice.kept == blend.BLEND and choice.weight <= 0.5
    assert choice.valid["blend"] < choice.valid["classifier"]  # validation log loss
    np.testing.assert_allclose(choice.mix(clf, tfidf), choice.weight * clf + (1 - choice.weight) * tfidf)


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
