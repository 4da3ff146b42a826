"""The backward classifier's and the forward+backward ensemble's figures (trainer.bidirectional).

As in the ULMFiT paper, the ensemble averages the two classifiers' probabilities. Each
model gets its own decision thresholds (multi-label), tuned on the validation rows like
the forward model's, and is scored on the same rows.
"""

from __future__ import annotations

import numpy as np

from trainer.classification import metrics as M


def figures(
    fwd: tuple[np.ndarray, np.ndarray],
    bwd: tuple[np.ndarray, np.ndarray],
    *,
    valid_targets: np.ndarray,
    scored_targets: np.ndarray,
    labels: list[str],
    multi_label: bool,
    allow_empty: bool,
    threshold_policy: str = M.DEFAULT_POLICY,
) -> dict:
    """fwd, bwd: (validation probs, scored rows' probs) of each model -> {"backward": …, "ensemble": …}
    with the metrics.json fields (per_label, micro_f1, macro_f1, accuracy)."""
    out = {}
    ensemble = ((fwd[0] + bwd[0]) / 2, (fwd[1] + bwd[1]) / 2)
    for name, (valid_probs, probs) in (("backward", bwd), ("ensemble", ensemble)):
        thresholds = M.choose_thresholds(valid_probs, valid_targets, threshold_policy) if multi_label else None
        pred = M.decide(probs, multi_label=multi_label, thresholds=thresholds, allow_empty=allow_empty)
        out[name] = M.score(pred, scored_targets, labels, thresholds)
    return out


def summary(result: dict, extra: dict) -> str:
    """One log line: the backward model and the ensemble next to the forward model."""
    fwd, bwd, ens = result["macro_f1"], extra["backward"]["macro_f1"], extra["ensemble"]["macro_f1"]
    return (
        f"bidirectional: backward macro-F1 {bwd:.3f}, forward+backward ensemble {ens:.3f} "
        f"(forward {fwd:.3f}, ensemble {ens - fwd:+.3f})"
    )
