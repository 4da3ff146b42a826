import numpy as np
import pytest

from trainer.classification import metrics as M

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
    thr = M.choose_thresholds(probs, targets, policy=M.PER_LABEL)
    assert 0.2 < thr[0] <= 0.3 and thr[1] == 0.5
    pred = M.decide(probs, multi_label=True, thresholds=thr)
    assert pred[[0, 2]].all()
    # Rows where no label clears its threshold still get their most probable label.
    assert pred[1].tolist() == [True, False] and pred[3].tolist() == [False, True]


def test_shrunk_thresholds_lean_on_the_global_one_where_a_label_has_few_validation_rows():
    rng = np.random.default_rng(0)
    n = 400
    targets = np.zeros((n, 2), dtype=int)
    targets[:200, 0] = 1  # label 0: 200 validation positives
    targets[0, 1] = 1  # label 1: a single one
    probs = np.where(targets == 1, rng.uniform(0.55, 1.0, (n, 2)), rng.uniform(0.0, 0.45, (n, 2)))
    probs[0, 1] = 0.06  # the one positive of label 1 happens to sit very low
    own = M.choose_thresholds(probs, targets, policy=M.PER_LABEL)
    shrunk = M.choose_thresholds(probs, targets, policy=M.SHRUNK)
    assert own[1] == pytest.approx(0.05)  # per label: whatever catches the one positive
    # Shrunk: the well-supported label keeps its own threshold (almost), the other moves most of the way to the
    # global one (between 0.45 and 0.55 here): one validation row against SHRINK_ROWS of the global threshold.
    assert abs(shrunk[0] - own[0]) < 0.01
    glob = (shrunk[1] * (1 + M.SHRINK_ROWS) - own[1]) / M.SHRINK_ROWS
    assert 0.45 <= glob <= 0.55 and shrunk[1] > 0.4
    with pytest.raises(ValueError, match="unknown threshold policy"):
        M.choose_thresholds(probs, targets, policy="median")


def test_single_label_uses_argmax_and_multi_label_never_predicts_nothing():
    probs = np.array([[0.2, 0.8], [0.6, 0.4]])
    assert M.decide(probs, multi_label=False, thresholds=None).tolist() == [[False, True], [True, False]]
    assert M.decide(probs, multi_label=True, thresholds=np.array([0.9, 0.9])).tolist() == [[False, True], [True, False]]
