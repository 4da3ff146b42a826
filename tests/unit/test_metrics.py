import pytest
import numpy as np

from trainer import metrics as M

LABELS = ["a", "b"]


def test_perfect_and_baseline():
    t = np.array([[1, 0], [0, 1], [1, 1], [1, 0]])
    s = M.score(t.astype(bool), t, LABELS)
    assert s["macro_f1"] == 1.0 and s["micro_f1"] == 1.0 and s["accuracy"] == 1.0
    base = M.majority_baseline(t, t, LABELS)  # always "a"
    assert base["accuracy"] == 0.5 and base["macro_f1"] == pytest.approx((2 * 0.75 / 1.75) / 2, abs=1e-3)


def test_thresholds_are_chosen_per_label_on_validation():
    probs = np.array([[0.30, 0.9], [0.20, 0.1], [0.35, 0.8], [0.10, 0.2]])
    targets = np.array([[1, 1], [0, 0], [1, 1], [0, 0]])
    thr = M.choose_thresholds(probs, targets)
    assert 0.2 < thr[0] <= 0.3 and thr[1] == 0.5
    pred = M.decide(probs, multi_label=True, thresholds=thr)
    assert pred[[0, 2]].all()
    # Rows where no label clears its threshold still get their most probable label.
    assert pred[1].tolist() == [True, False] and pred[3].tolist() == [False, True]


def test_single_label_uses_argmax_and_multi_label_never_predicts_nothing():
    probs = np.array([[0.2, 0.8], [0.6, 0.4]])
    assert M.decide(probs, multi_label=False, thresholds=None).tolist() == [[False, True], [True, False]]
    assert M.decide(probs, multi_label=True, thresholds=np.array([0.9, 0.9])).tolist() == [[False, True], [True, False]]
