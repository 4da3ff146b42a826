"""The linear probe the classifier's head starts from (trainer.classification.probe)."""

from __future__ import annotations

import numpy as np
import pytest


def _data(n=120, d=12, labels=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (labels, d))
    y = np.arange(n) % labels
    x = centres[y] + rng.normal(0, 1, (n, d)) + 5.0  # off-centre and unscaled: the probe standardises
    return x, np.eye(labels)[y]


@pytest.mark.parametrize("labels", [2, 4])
def test_the_head_it_is_written_into_predicts_exactly_the_probe(labels):
    import torch
    from fastai.text.all import AWD_LSTM, awd_lstm_clas_config
    from fastai.text.models.core import get_text_classifier

    from trainer.classification.probe import fit_probe, install, linear_head

    x, t = _data(d=3 * 8, labels=labels)
    probe = fit_probe(x[:90], t[:90], multi_label=False, seed=0)
    assert probe.c > 0 and np.isfinite(probe.cv_loss)
    model = get_text_classifier(
        AWD_LSTM, 50, labels, config={**awd_lstm_clas_config, "emb_sz": 8, "n_hid": 16, "n_layers": 1}, lin_ftrs=[]
    )
    linear_head(model)
    install(model[1], probe)
    head = model[1].layers.eval()
    logits = head(torch.as_tensor(x[90:], dtype=torch.float32)).detach().numpy()
    np.testing.assert_allclose(logits, probe.logits(x[90:]), rtol=1e-4, atol=1e-4)
    probs = probe.probabilities(x[90:])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    assert (probs.argmax(axis=1) == t[90:].argmax(axis=1)).mean() > 0.9  # separable clusters are learned


def test_a_label_absent_from_the_training_rows_is_never_predicted():
    from trainer.classification.probe import fit_probe

    x, t = _data(labels=3)
    keep = t[:, 2] == 0
    probe = fit_probe(x[keep], t[keep], multi_label=False, seed=0)
    assert probe.probabilities(x)[:, 2].max() < 1e-6


def test_multi_label_probes_fit_one_logistic_regression_per_label():
    from trainer.classification.probe import fit_probe

    x, t = _data(labels=3)
    multi = np.column_stack([t[:, 0] + t[:, 1], t[:, 2], np.zeros(len(t))])  # the last label is never on
    probe = fit_probe(x, multi, multi_label=True, seed=0)
    probs = probe.probabilities(x)
    assert ((probs[:, :2] > 0.5) == multi[:, :2].astype(bool)).mean() > 0.9
    assert probs[:, 2].max() < 0.05


def test_c_is_chosen_by_cross_validated_log_loss():
    from trainer.classification import probe as P

    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(60, 40)), np.eye(2)[rng.integers(0, 2, 60)]  # noise: the strongest penalty wins
    assert P.fit_probe(x, y, multi_label=False, seed=0).c <= P.C_GRID[1]
    x, t = _data(n=200, d=5, labels=2)  # clean signal in few dimensions: a weak penalty
    assert P.fit_probe(x, t, multi_label=False, seed=0).c >= 0.3


def test_a_multi_label_probe_gives_the_probabilities_of_the_classifier_loss_not_of_its_class_weights():
    # A rare label (6 % of rows) with a weak signal: a balanced fit's probabilities of it were inflated, so
    # its validation BCE lost to fine-tuned epochs (unweighted BCE) that ranked worse (fr_mlma_hate).
    from trainer.classification.probe import fit_probe

    rng = np.random.default_rng(1)
    n, d = 1200, 10
    x = rng.normal(0, 1, (n, d))
    rare = (x[:, 0] + rng.normal(0, 1.5, n) > 2.8).astype(float)
    common = (x[:, 1] + rng.normal(0, 1, n) > 0).astype(float)
    t = np.column_stack([rare, common])
    train, held = slice(0, 800), slice(800, None)
    unweighted = fit_probe(x[train], t[train], multi_label=True, seed=0)  # trainer.class_weights none
    balanced = fit_probe(x[train], t[train], multi_label=True, seed=0, loss_power=1.0)
    p0, p1 = unweighted.probabilities(x[held]), balanced.probabilities(x[held])
    assert 0.03 < rare.mean() < 0.1
    assert abs(p0[:, 0].mean() - rare[held].mean()) < 0.03 < p1[:, 0].mean() - rare[held].mean()

    def bce(p, y):
        p = np.clip(p, 1e-7, 1 - 1e-7)
        return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())

    assert bce(p0[:, 0], rare[held]) < bce(p1[:, 0], rare[held]) - 0.05
    if unweighted.c == balanced.c:  # same fit, moved intercepts: the ranking thresholds choose from is the same
        assert (np.argsort(p0[:, 0], kind="stable") == np.argsort(p1[:, 0], kind="stable")).all()


def test_fine_tuning_replaces_the_probe_only_when_clearly_better_row_by_row():
    from trainer.classification.probe import fine_tuning_confirmed

    rng = np.random.default_rng(0)
    y = np.eye(4)[rng.integers(0, 4, 80)]
    probe = np.clip(y * 0.5 + rng.uniform(0, 0.3, y.shape), 1e-3, 1)
    probe /= probe.sum(axis=1, keepdims=True)
    noisy = np.clip(probe + rng.normal(0, 0.05, y.shape), 1e-3, 1)  # as good, give or take: a lower mean by luck
    noisy /= noisy.sum(axis=1, keepdims=True)
    better = np.clip(y * 0.9 + 0.025, 1e-3, 1)
    better /= better.sum(axis=1, keepdims=True)
    assert fine_tuning_confirmed(probe, better, y, multi_label=False)[0]
    confirmed, gain = fine_tuning_confirmed(probe, noisy, y, multi_label=False)
    assert not confirmed and abs(gain) < 0.05
    assert not fine_tuning_confirmed(probe[:1], better[:1], y[:1], multi_label=False)[0]  # one row tells nothing
