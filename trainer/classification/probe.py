"""The linear probe: a logistic regression on the fine-tuned encoder's pooled states, the classifier's first head.

ULMFiT's classifier reads the encoder's concat pooling (last state, max and mean of the last
LSTM layer's outputs) through a head and fine-tunes both. On a hundred rows that head learned
nothing in the three steps of its frozen epoch, and the unfrozen encoder then memorised the rows:
IMDb at 100 labels scored chance while a probe of the same encoder did better (docs/DECISIONS.md
"The classifier starts from its probe"). So the head starts where a careful engineer would stop:
a logistic regression on those pooled features of the training rows (standardised; class-weighted
like the TF-IDF baseline: on 100 SIB-200 rows the unweighted one, strongly regularised, fell back on
the frequent topics, macro-F1 0.18 against 0.29; C by cross-validated log loss on the training
rows), written into the classifier's linear head
(BatchNorm's running statistics standardise, the Linear holds the coefficients). Its validation
loss is epoch 0 of trainer.best_epoch, so fine-tuning that never beats it keeps the probe's head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

C_GRID = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
MAX_CV_ROWS = 4000  # C is chosen on a seeded sample of at most this many training rows (fitting uses all)
FOLDS = 5
BN_EPS = 1e-5  # torch.nn.BatchNorm1d's default: the standardisation below is the head's BatchNorm in eval mode


@dataclass(frozen=True)
class Probe:
    """A fitted probe: standardisation (mean, var) and logits = coef @ standardised + intercept."""

    mean: np.ndarray  # (features,)
    var: np.ndarray  # (features,)
    coef: np.ndarray  # (labels, features)
    intercept: np.ndarray  # (labels,)
    multi_label: bool
    c: float
    cv_loss: float  # cross-validated log loss of C on the training rows

    def logits(self, x: np.ndarray) -> np.ndarray:
        z = (x - self.mean) / np.sqrt(self.var + BN_EPS)
        return z @ self.coef.T + self.intercept

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        logits = self.logits(x)
        if self.multi_label:
            return 1.0 / (1.0 + np.exp(-np.clip(logits, -50, 50)))
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def describe(self) -> str:
        return f"C={self.c:g}, cross-validated log loss {self.cv_loss:.4f}"


def _standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mean, var = x.mean(axis=0), x.var(axis=0)
    return (x - mean) / np.sqrt(var + BN_EPS), mean, var


def _fit_single(z: np.ndarray, y: np.ndarray, n_labels: int, c: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(coef, intercept) of a multinomial logistic regression, for every label (absent ones: never predicted)."""
    from sklearn.linear_model import LogisticRegression

    coef, intercept = np.zeros((n_labels, z.shape[1])), np.full(n_labels, -30.0)
    present = np.unique(y)
    if len(present) == 1:
        intercept[present[0]] = 0.0
        return coef, intercept
    model = LogisticRegression(C=c, class_weight="balanced", max_iter=3000, random_state=seed).fit(z, y)
    if len(present) == 2:  # sklearn's binary form: one row for the second class
        coef[present[1]], intercept[present[1]] = model.coef_[0] / 2, model.intercept_[0] / 2
        coef[present[0]], intercept[present[0]] = -model.coef_[0] / 2, -model.intercept_[0] / 2
    else:
        coef[present], intercept[present] = model.coef_, model.intercept_
    return coef, intercept


def _fit_multi(z: np.ndarray, t: np.ndarray, c: float, seed: int, power: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(coef, intercept): one binary logistic regression per label (a label always or never on: its rate).

    Fitted class-weighted (balanced), which keeps rare labels' coefficients alive under strong
    regularisation, then each intercept moved by the prior correction (1 - power) * log(neg / pos):
    the probabilities of a fit whose positives weigh (neg / pos) ** power, i.e. on the classifier's
    own loss (trainer.class_weights; none: power 0). Uncorrected, a balanced probe's probabilities of
    rare labels were inflated: on 1,000 fr_mlma_hate rows its validation BCE was 0.61 against the
    fine-tuned epochs' 0.49, so best_epoch dropped it though it ranked better (macro-F1 0.348 against
    0.314 on test). Within a label the ranking is unchanged, and multi-label thresholds are tuned per
    label, so the correction moves the loss, not what the thresholds can reach."""
    from sklearn.linear_model import LogisticRegression

    coef, intercept = np.zeros((t.shape[1], z.shape[1])), np.zeros(t.shape[1])
    for j in range(t.shape[1]):
        rate = float(t[:, j].mean())
        if rate in (0.0, 1.0):
            rate = min(max(rate, 1.0 / (len(t) + 2)), 1.0 - 1.0 / (len(t) + 2))
            intercept[j] = np.log(rate / (1 - rate))
            continue
        model = LogisticRegression(C=c, class_weight="balanced", max_iter=3000, random_state=seed).fit(z, t[:, j])
        coef[j], intercept[j] = model.coef_[0], model.intercept_[0] - (1.0 - power) * np.log((1 - rate) / rate)
    return coef, intercept


def _fit(z, targets, multi_label: bool, c: float, seed: int, power: float = 0.0):
    if multi_label:
        return _fit_multi(z, targets, c, seed, power)
    return _fit_single(z, targets.argmax(axis=1), targets.shape[1], c, seed)


def _loss(z, coef, intercept, targets, multi_label: bool) -> float:
    probe = Probe(np.zeros(z.shape[1]), np.ones(z.shape[1]) - BN_EPS, coef, intercept, multi_label, 0.0, 0.0)
    p = np.clip(probe.probabilities(z), 1e-7, 1 - 1e-7)
    if multi_label:
        return float(-(targets * np.log(p) + (1 - targets) * np.log(1 - p)).mean())
    return float(-np.log((p * targets).sum(axis=1)).mean())


def _folds(targets: np.ndarray, multi_label: bool, seed: int) -> list:
    from sklearn.model_selection import KFold, StratifiedKFold

    n = len(targets)
    if not multi_label:
        y = targets.argmax(axis=1)
        smallest = np.bincount(y)[np.bincount(y) > 0].min()
        if smallest >= 2:
            return list(
                StratifiedKFold(min(FOLDS, int(smallest)), shuffle=True, random_state=seed).split(np.zeros(n), y)
            )
    return list(KFold(min(FOLDS, n), shuffle=True, random_state=seed).split(np.zeros(n)))


def fit_probe(x: np.ndarray, targets: np.ndarray, *, multi_label: bool, seed: int, loss_power: float = 0.0) -> Probe:
    """The probe on features `x` (rows, features) of the training rows and their 0/1 `targets` (rows, labels).
    Multi-label: its probabilities are those of the classifier's loss, whose positives weigh
    (negatives / positives) ** loss_power (_fit_multi)."""
    x, targets = np.asarray(x, dtype=np.float64), np.asarray(targets, dtype=np.float64)
    z, mean, var = _standardise(x)
    rows = np.arange(len(z))
    if len(rows) > MAX_CV_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(rows, MAX_CV_ROWS, replace=False))
    losses = {}
    if len(rows) >= 4:
        folds = _folds(targets[rows], multi_label, seed)
        for c in C_GRID:
            held = [
                _loss(
                    z[rows[va]],
                    *_fit(z[rows[tr]], targets[rows[tr]], multi_label, c, seed, loss_power),
                    targets[rows[va]],
                    multi_label,
                )
                * len(va)
                for tr, va in folds
            ]
            losses[c] = sum(held) / len(rows)
    c = min(losses, key=lambda k: (round(losses[k], 9), k)) if losses else 0.1
    coef, intercept = _fit(z, targets, multi_label, c, seed, loss_power)
    return Probe(mean, var, coef, intercept, multi_label, c, losses.get(c, float("nan")))


def pooled_features(model, tokens, rows: list[int], *, bs: int, seq_len: int) -> np.ndarray:
    """What the classifier's head reads for `rows` (its concat pooling of the encoder's outputs), in row
    order, in eval mode (no dropout), fp32. `model`: the classifier (SentenceEncoder, head)."""
    import torch
    from fastai.text.all import pad_input_chunk
    from fastai.text.models.core import masked_concat_pool

    encoder = model[0]
    was_training = encoder.training
    encoder.eval()
    order = sorted(rows, key=lambda i: -len(tokens.text(i)))  # batches of similar lengths pad little
    out = {}
    device = next(encoder.parameters()).device
    try:
        with torch.no_grad():
            for start in range(0, len(order), bs):
                chunk = order[start : start + bs]
                batch = pad_input_chunk(
                    [(torch.from_numpy(tokens.text(i).astype(np.int64)),) for i in chunk], pad_idx=1, seq_len=seq_len
                )
                x = torch.stack([b[0] for b in batch]).to(device)
                hidden, mask = encoder(x)
                pooled = masked_concat_pool(hidden.float(), mask, seq_len).cpu().numpy()
                out.update(zip(chunk, pooled))
    finally:
        encoder.train(was_training)
    return np.stack([out[i] for i in rows]) if rows else np.zeros((0, 0))


def install(head, probe: Probe) -> None:
    """Writes `probe` into the classifier's linear head (linear_head's layout): BatchNorm -> Dropout -> Linear."""
    import torch

    bn, linear = head.layers[0][0], head.layers[0][-1]
    with torch.no_grad():
        bn.running_mean.copy_(torch.as_tensor(probe.mean, dtype=bn.running_mean.dtype))
        bn.running_var.copy_(torch.as_tensor(probe.var, dtype=bn.running_var.dtype))
        bn.weight.fill_(1.0)
        bn.bias.zero_()
        linear.weight.copy_(torch.as_tensor(probe.coef, dtype=linear.weight.dtype))
        linear.bias.copy_(torch.as_tensor(probe.intercept, dtype=linear.bias.dtype))


def linear_head(model) -> None:
    """The classifier's head as BatchNorm -> Dropout -> Linear with a bias (fastai's LinBnDrop has none
    after a BatchNorm: the probe's intercept needs one), built with lin_ftrs=[] (no hidden layer)."""
    import torch.nn as nn

    block = model[1].layers[0]
    old = block[-1]
    block[-1] = nn.Linear(old.in_features, old.out_features, bias=True)


def fine_tuning_confirmed(
    probe_probs: np.ndarray, clf_probs: np.ndarray, targets: np.ndarray, *, multi_label: bool
) -> tuple[bool, float]:
    """Whether the fine-tuned classifier's validation loss is clearly below the probe's, row by row (the
    blend's rule: a 90 % one-sided paired bootstrap bound above zero) -> (confirmed, mean gain per row).

    Best-epoch selection took any lower validation loss, and on 75-99 validation rows that lost to the
    probe on test rows in 2 of 15 SIB-200 cells (ja 300: -0.031 macro-F1, es 701: -0.018): the mean
    log loss of so few rows moves by more than the epochs differ."""
    from trainer.classification.blend import clear_gain, row_losses

    gains = row_losses(probe_probs, targets, multi_label=multi_label) - row_losses(
        clf_probs, targets, multi_label=multi_label
    )
    return clear_gain(gains), float(gains.mean()) if len(gains) else 0.0
