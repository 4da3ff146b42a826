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
    model = get_text_classifier(AWD_LSTM, 50, labels, config={**awd_lstm_clas_config, "emb_sz": 8, "n_hid": 16,
                                                              "n_layers": 1}, lin_ftrs=[])
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
