"""Never worse than the baseline by construction: the classifier, or its blend with TF-IDF.

With `trainer.blend_tfidf` the run also scores, on the validation rows, blends of the
classifier's and the TF-IDF baseline's probabilities (w * classifier + (1 - w) * TF-IDF, w on a
grid; w = 0 is TF-IDF alone), each with its own thresholds for multi-label data, and keeps the
blend when it scores better there than the classifier alone (macro-F1 + micro-F1: both count).
Every choice is made on validation rows; the scored rows only report it. `trainctl predict`
serves what was kept (the TF-IDF part is read from tfidf.json + tfidf.npz beside model.pth).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer import metrics as M

WEIGHTS = tuple(round(w, 1) for w in np.arange(0.0, 1.0, 0.1))  # the classifier's share; 1.0 = no blend
CLASSIFIER, BLEND = "classifier", "blend"
MIN_GAIN = 0.005  # on validation (sum of the two F1s): a blend must beat the classifier by more than noise


@dataclass(frozen=True)
class Choice:
    """What the run keeps: `kept` (classifier or blend), the classifier's weight, its thresholds."""

    kept: str
    weight: float  # 1.0 for the classifier alone
    thresholds: np.ndarray | None
    valid: dict  # {"classifier": score, "blend": score} on the validation rows (macro + micro)

    def mix(self, clf_probs: np.ndarray, tfidf_probs: np.ndarray | None) -> np.ndarray:
        if self.kept == CLASSIFIER:
            return clf_probs
        return self.weight * clf_probs + (1.0 - self.weight) * tfidf_probs


def mix(weight: float, clf_probs: np.ndarray, tfidf_probs: np.ndarray) -> np.ndarray:
    return weight * clf_probs + (1.0 - weight) * tfidf_probs


def _fit(probs: np.ndarray, targets: np.ndarray, labels: list[str], *, multi_label: bool, allow_empty: bool,
         threshold_policy: str) -> tuple[float, np.ndarray | None]:
    thresholds = M.choose_thresholds(probs, targets, policy=threshold_policy) if multi_label else None
    s = M.score(M.decide(probs, multi_label=multi_label, thresholds=thresholds, allow_empty=allow_empty),
                targets, labels)
    return s["macro_f1"] + s["micro_f1"], thresholds


def choose(clf_valid: np.ndarray, tfidf_valid: np.ndarray | None, targets: np.ndarray, labels: list[str], *,
           multi_label: bool, allow_empty: bool, threshold_policy: str = M.DEFAULT_POLICY) -> Choice:
    """The classifier, or the best blend on the validation rows if it beats the classifier there."""
    fit = dict(labels=labels, multi_label=multi_label, allow_empty=allow_empty, threshold_policy=threshold_policy)
    clf_score, clf_thresholds = _fit(clf_valid, targets, **fit)
    if tfidf_valid is None:
        return Choice(CLASSIFIER, 1.0, clf_thresholds, {CLASSIFIER: round(clf_score, 4)})
    best = None
    for w in sorted(WEIGHTS, reverse=True):  # ties: the larger classifier share
        score, thresholds = _fit(mix(w, clf_valid, tfidf_valid), targets, **fit)
        if best is None or score > best[0]:
            best = (score, w, thresholds)
    score, w, thresholds = best
    valid = {CLASSIFIER: round(clf_score, 4), BLEND: round(score, 4), "blend_weight": w}
    if score > clf_score + MIN_GAIN:
        return Choice(BLEND, w, thresholds, valid)
    return Choice(CLASSIFIER, 1.0, clf_thresholds, valid)
