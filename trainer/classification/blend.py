"""Never worse than the baseline by construction: the classifier, its blend with TF-IDF, or TF-IDF alone.

With `trainer.blend_tfidf` the run also scores, on the validation rows, blends of the
classifier's and the TF-IDF baseline's probabilities (w * classifier + (1 - w) * TF-IDF, w on a
grid from 0 = TF-IDF alone to 1 = the classifier alone) by their log loss. Log loss, not F1: on
25-100 validation rows F1 moves in steps of a row and picked weights that lost on the test rows
(docs/BENCHMARKS.md "Real tasks"); the log loss of the mixed probabilities moves smoothly with w.

The weight is chosen on half of the validation rows (every other one) and kept only if it also
beats TF-IDF alone on the other half, clearly (the gain's 90 % one-sided bootstrap bound above
zero); otherwise the run keeps TF-IDF alone (w = 0). Chosen and judged on the same rows, a weight
won by the noise of 25-75 rows (the classifier's epoch was picked on them too) and lost up to
0.042 macro-F1 on the test rows; checked this way, the worst measured was −0.013, inside its
interval (docs/BENCHMARKS.md "Real tasks"). Each blend gets its own
decision thresholds (multi-label), from all validation rows. The scored rows only report the
choice. `trainctl predict` serves what was kept (the TF-IDF part from tfidf.json + tfidf.npz).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer.classification import metrics as M

WEIGHTS = tuple(round(w, 1) for w in np.arange(0.0, 1.01, 0.1))  # the classifier's share; 1.0 = no blend
CLASSIFIER, BLEND = "classifier", "blend"
EPS = 1e-6
RESAMPLES = 2000  # bootstrap of the rows a weight is checked on


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


def row_losses(probs: np.ndarray, targets: np.ndarray, *, multi_label: bool) -> np.ndarray:
    """Each row's binary cross-entropy averaged over labels (multi-label) or its true label's cross-entropy."""
    p = np.clip(probs, EPS, 1 - EPS)
    if multi_label:
        return -(targets * np.log(p) + (1 - targets) * np.log(1 - p)).mean(axis=1)
    return -np.log((p * targets).sum(axis=1))


def log_loss(probs: np.ndarray, targets: np.ndarray, *, multi_label: bool) -> float:
    """Mean binary cross-entropy per label (multi-label) or cross-entropy of the true label (single-label)."""
    return float(row_losses(probs, targets, multi_label=multi_label).mean())


def _lowest(losses: dict[float, np.ndarray], rows: np.ndarray, weights) -> float:
    """The weight with the lowest mean loss on `rows`; ties: the larger classifier share."""
    return max(weights, key=lambda w: (-round(float(losses[w][rows].mean()), 12), w))


def clear_gain(gains: np.ndarray) -> bool:
    """The mean per-row gain (over TF-IDF alone; over the probe's head, trainer.stages.classifier) is
    above zero with 90 % confidence (one-sided, a seeded paired bootstrap of the rows); two rows at least."""
    if len(gains) < 2:
        return False
    resampled = gains[np.random.default_rng(0).integers(0, len(gains), (RESAMPLES, len(gains)))].mean(axis=1)
    return bool(np.quantile(resampled, 0.10) > 0)


def choose(
    clf_valid: np.ndarray,
    tfidf_valid: np.ndarray | None,
    targets: np.ndarray,
    labels: list[str],
    *,
    multi_label: bool,
    threshold_policy: str = M.DEFAULT_POLICY,
) -> Choice:
    """The weight chosen on half the validation rows when it also clearly beats TF-IDF alone on the other
    half (w = 1: the classifier alone), else TF-IDF alone (a blend with w = 0)."""

    def thresholds(p):
        return M.choose_thresholds(p, targets, policy=threshold_policy) if multi_label else None

    clf_loss = log_loss(clf_valid, targets, multi_label=multi_label)
    if tfidf_valid is None:
        return Choice(CLASSIFIER, 1.0, thresholds(clf_valid), {CLASSIFIER: round(clf_loss, 4)})
    losses = {w: row_losses(mix(w, clf_valid, tfidf_valid), targets, multi_label=multi_label) for w in WEIGHTS}
    rows = np.arange(len(targets))
    chosen_on, checked_on = rows[0::2], rows[1::2]
    w = chosen = _lowest(losses, chosen_on, WEIGHTS)
    confirmed = clear_gain(losses[0.0][checked_on] - losses[w][checked_on])
    if not confirmed:
        w = 0.0
    shown = w if w < 1 else _lowest(losses, rows, WEIGHTS[:-1])  # the blend column: the best blend below 1
    valid = {
        CLASSIFIER: round(clf_loss, 4),
        BLEND: round(float(losses[shown].mean()), 4),
        "blend_weight": shown,
        "chosen_weight": chosen,
        "chosen_on_rows": len(chosen_on),
        "checked_on_rows": len(checked_on),
        "confirmed": confirmed,
    }
    if w == 1.0:
        return Choice(CLASSIFIER, 1.0, thresholds(clf_valid), valid)
    return Choice(BLEND, w, thresholds(mix(w, clf_valid, tfidf_valid)), valid)
