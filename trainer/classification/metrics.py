"""Per-label binary metrics, decision thresholds and a majority-class baseline.

Works on plain numpy arrays: probs (n, k) and targets (n, k) in {0,1}.
"""

from __future__ import annotations

import numpy as np

THRESHOLD_GRID = np.round(np.arange(0.05, 0.96, 0.05), 2)


def _prf(pred: np.ndarray, true: np.ndarray) -> tuple[float, float, float, int]:
    tp = int((pred & true).sum())
    fp = int((pred & ~true).sum())
    fn = int((~pred & true).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1, int(true.sum())


PER_LABEL, SHRUNK = "per_label", "shrunk"
POLICIES = (SHRUNK, PER_LABEL)
DEFAULT_POLICY = SHRUNK
SHRINK_ROWS = 10  # a label's own threshold counts as much as the global one at this many validation positives


def _best(scores: list[tuple[float, float]], prefer: float) -> float:
    """The grid threshold with the best F1 (ties: closest to `prefer`)."""
    return max((f1, -abs(t - prefer), t) for t, f1 in scores)[2]


def choose_thresholds(probs: np.ndarray, targets: np.ndarray, policy: str = DEFAULT_POLICY) -> np.ndarray:
    """Per-label decision thresholds from validation rows.

    per_label: each label's grid threshold with the best validation F1 (ties: closest to 0.5).
    shrunk: that threshold pulled towards one global threshold (the best micro-F1 over all labels)
    by the label's validation support n: (n * own + SHRINK_ROWS * global) / (n + SHRINK_ROWS). A label
    with one or two validation positives otherwise gets whatever threshold happens to catch them
    (0.05 or 0.70 on 20 rows), which does not hold on new rows."""
    true = targets.astype(bool)
    own = np.full(probs.shape[1], 0.5)
    if policy not in POLICIES:
        raise ValueError(f"unknown threshold policy {policy!r} (one of {', '.join(POLICIES)})")
    prefer = 0.5
    if policy == SHRUNK:
        prefer = _best([(t, _prf(probs >= t, true)[2]) for t in THRESHOLD_GRID], 0.5)
    for j in range(probs.shape[1]):
        own[j] = _best([(t, _prf(probs[:, j] >= t, true[:, j])[2]) for t in THRESHOLD_GRID], prefer)
    if policy == PER_LABEL:
        return own
    support = true.sum(axis=0)
    return np.round((support * own + SHRINK_ROWS * prefer) / (support + SHRINK_ROWS), 3)


def decide(
    probs: np.ndarray, *, multi_label: bool, thresholds: np.ndarray | None, allow_empty: bool = False
) -> np.ndarray:
    """Boolean predictions: thresholds for multi-label, argmax otherwise.

    Multi-label rows get at least their most likely label unless `allow_empty` (the
    training data has rows with no label, e.g. all-zero label columns)."""
    if multi_label:
        pred = probs >= thresholds
        if not allow_empty:
            empty = ~pred.any(axis=1)
            pred[empty, probs[empty].argmax(axis=1)] = True
        return pred
    pred = np.zeros_like(probs, dtype=bool)
    pred[np.arange(len(probs)), probs.argmax(axis=1)] = True
    return pred


def score(pred: np.ndarray, targets: np.ndarray, labels: list[str], thresholds=None) -> dict:
    true = targets.astype(bool)
    per_label = {}
    for j, label in enumerate(labels):
        p, r, f1, support = _prf(pred[:, j], true[:, j])
        per_label[label] = {
            "precision": round(p, 4),
            "recall": round(r, 4),
            "f1": round(f1, 4),
            "support": support,
            "threshold": None if thresholds is None else float(thresholds[j]),
        }
    micro = _prf(pred.ravel(), true.ravel())[2]
    macro = float(np.mean([v["f1"] for v in per_label.values()]))
    accuracy = float((pred == true).all(axis=1).mean())
    return {
        "per_label": per_label,
        "micro_f1": round(micro, 4),
        "macro_f1": round(macro, 4),
        "accuracy": round(accuracy, 4),
    }


def majority_baseline(train_targets: np.ndarray, valid_targets: np.ndarray, labels: list[str]) -> dict:
    """Predict the most frequent training label for every validation row."""
    pred = np.zeros_like(valid_targets, dtype=bool)
    pred[:, int(train_targets.sum(axis=0).argmax())] = True
    s = score(pred, valid_targets, labels)
    return {
        "strategy": "most frequent training label",
        "micro_f1": s["micro_f1"],
        "macro_f1": s["macro_f1"],
        "accuracy": s["accuracy"],
    }
