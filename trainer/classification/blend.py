"""Never worse than the baseline by construction: the classifier, or its blend with TF-IDF.

With `trainer.blend_tfidf` the run also scores, on the validation rows, blends of the
classifier's and the TF-IDF baseline's probabilities (w * classifier + (1 - w) * TF-IDF, w on a
grid from 0 = TF-IDF alone to 1 = the classifier alone) by their log loss, and keeps the blend
when a w below 1 has the lowest. Log loss, not F1: on 25-100 validation rows F1 moves in steps of
a row and picked weights that lost on the test rows (docs/BENCHMARKS.md "Real tasks"); the log
loss of the mixed probabilities moves smoothly with w. Each blend gets its own decision
thresholds (multi-label). Every choice is made on validation rows; the scored rows only report
it. `trainctl predict` serves what was kept (the TF-IDF part from tfidf.json + tfidf.npz).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer import metrics as M

WEIGHTS = tuple(round(w, 1) for w in np.arange(0.0, 1.01, 0.1))  # the classifier's share; 1.0 = no blend
CLASSIFIER, BLEND = "classifier", "blend"
EPS = 1e-6


@dataclass(frozen=True)
class Choice:
    """What the run keeps: `kept` (classifier or blend), the classifier's weight, its thresholds."""

    kept: str
    weight: float  # 1.0 for the classifier alone
    thresholds: np.ndarray | None
    valid: dict  # validation log loss of the classifier and of the best blend, and that blend's weight

    def mix(self, clf_probs: np.ndarray, tfidf_probs: np.ndarray | None) -> np.ndarray:
        if self.kept == CLASSIFIER:
            return clf_probs
        return self.weight * clf_probs + (1.0 - self.weight) * tfidf_probs


def mix(weight: float, clf_probs: np.ndarray, tfidf_probs: np.ndarray) -> np.ndarray:
    return weight * clf_probs + (1.0 - weight) * tfidf_probs


def log_loss(probs: np.ndarray, targets: np.ndarray, *, multi_label: bool) -> float:
    """Mean binary cross-entropy per label (multi-label) or cross-entropy of the true label (single-label)."""
    p = np.clip(probs, EPS, 1 - EPS)
    if multi_label:
        return float(-(targets * np.log(p) + (1 - targets) * np.log(1 - p)).mean())
    return float(-np.log((p * targets).sum(axis=1)).mean())


def choose(clf_valid: np.ndarray, tfidf_valid: np.ndarray | None, targets: np.ndarray, labels: list[str], *,
           multi_label: bool, threshold_policy: str = M.DEFAULT_POLICY) -> Choice:
    """The blend weight with the lowest validation log loss; the classifier alone when that is w = 1."""
    thresholds = (lambda p: M.choose_thresholds(p, targets, policy=threshold_policy) if multi_label else None)
    clf_loss = log_loss(clf_valid, targets, multi_label=multi_label)
    if tfidf_valid is None:
        return Choice(CLASSIFIER, 1.0, thresholds(clf_valid), {CLASSIFIER: round(clf_loss, 4)})
    # ties: the larger classifier share (w = 1 first)
    losses = [(log_loss(mix(w, clf_valid, tfidf_valid), targets, multi_label=multi_label), -w)
              for w in WEIGHTS[:-1]]
    loss, w = min(losses)
    w = -w
    valid = {CLASSIFIER: round(clf_loss, 4), BLEND: round(loss, 4), "blend_weight": w}
    if loss < clf_loss:
        return Choice(BLEND, w, thresholds(mix(w, clf_valid, tfidf_valid)), valid)
    return Choice(CLASSIFIER, 1.0, thresholds(clf_valid), valid)
