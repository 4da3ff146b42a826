"""fastai's ULMFiT recipe (Howard & Ruder 2018; fastai's text tutorial), as training phases.

A phase is (freeze_to or None for all layers, epochs, learning rate or slice). The
classifier unfreezes one layer group per epoch (last group, then the last two, three),
halving the peak rate each time, then trains everything at lr/10 for the remaining
epochs. Within a phase, rates fall by 2.6 per layer group from the head down: for G
groups the slice spans a factor 2.6 ** (G - 1), whatever the number of LSTM layers.
"""

from __future__ import annotations

import math

LAYER_FACTOR = 2.6


MAX_CLF_EPOCHS = 100


def classifier_epochs(epochs: int, batches_per_epoch: int, min_steps: int) -> int:
    """`epochs`, raised so the classifier takes at least `min_steps` optimizer steps (at most
    MAX_CLF_EPOCHS): a few hundred labelled rows make a handful of batches per epoch, and a
    dozen epochs of them leave the classifier far from converged."""
    if min_steps <= 0 or batches_per_epoch <= 0:
        return epochs
    return max(epochs, min(MAX_CLF_EPOCHS, math.ceil(min_steps / batches_per_epoch)))


def classifier_phases(lr: float, epochs: int, n_groups: int, *, head_fitted: bool = False) -> list[tuple]:
    """The phases of `epochs` classifier epochs. `head_fitted` (the head starts from the linear probe,
    trainer.classification.probe): no head-only epoch: the probe is that epoch's fit, done exactly, and
    its rate (lr, the highest) only threw it away (IMDb: validation loss 0.62 -> 1.59 in that epoch)."""
    d = LAYER_FACTOR ** (n_groups - 1)
    head = [] if head_fitted else [(-1, 1, lr)]
    phases = [
        *head,
        (-2, 1, slice(lr / 2 / d, lr / 2)),
        (-3, 1, slice(lr / 4 / d, lr / 4)),
        (None, epochs - 2 - len(head), slice(lr / 10 / d, lr / 10)),
    ]
    left, trimmed = epochs, []
    for freeze_to, n, rate in phases:
        n = min(n, left)
        if n > 0:
            trimmed.append((freeze_to, n, rate))
        left -= n
    return trimmed


def lm_finetune_phases(lr: float, epochs: int) -> list[tuple]:
    """One epoch with only the new embeddings and head trainable, then all layers at lr/10; a single
    epoch trains all layers at lr/10 (frozen alone, the LSTMs would never learn the domain)."""
    if epochs == 1:
        return [(None, 1, lr / 10)]
    phases = [(-1, min(1, epochs), lr), (None, max(0, epochs - 1), lr / 10)]
    return [p for p in phases if p[1] > 0]


WEIGHT_POWER = {"none": 0.0, "sqrt": 0.5, "balanced": 1.0}  # trainer.class_weights -> the power below


def label_weights(targets, *, multi_label: bool, how: str):
    """Loss weights against imbalance, from the training rows' 0/1 targets (rows, labels), or None.

    Single-label: a weight per class, (1 / share) ** power, normalised so the average row weighs 1.
    Multi-label: BCE's pos_weight per label, (negatives / positives) ** power. power: 1 (balanced) or
    0.5 (sqrt: a label 100x rarer weighs 10x, not 100x: less noise from a few rare rows)."""
    import numpy as np

    if how == "none":
        return None
    power = WEIGHT_POWER[how]
    t = np.asarray(targets, dtype=float)
    pos = np.maximum(t.sum(axis=0), 1.0)
    if multi_label:
        return (np.maximum(len(t) - pos, 1.0) / pos) ** power
    share = pos / pos.sum()
    w = share**-power
    return w / (share * w).sum()
