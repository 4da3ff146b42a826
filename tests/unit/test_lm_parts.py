"""LM fine-tuning reads the user's text: epochs walk through the unlabelled texts in parts (trainer.lm.parts)."""

from __future__ import annotations

import numpy as np

from trainer.lm.parts import VALID_MAX_TOKENS, plan


def test_a_budget_larger_than_one_epoch_share_reads_different_texts_each_epoch():
    lengths = np.array([5] * 3 + [10] * 200)  # 3 training rows, then 200 unlabelled texts of 10 tokens
    p = plan(lengths, n_always=3, epochs=4, budget=1200, seed=0)
    assert p is not None and len(p.parts) == 4
    unlabelled = [set(part[3:].tolist()) for part in p.parts]
    for part in p.parts:  # the training rows in every epoch, then 300 tokens of unlabelled text
        assert part[:3].tolist() == [0, 1, 2]
        assert 300 <= lengths[part[3:]].sum() < 310
    assert all(not (a & b) for i, a in enumerate(unlabelled) for b in unlabelled[i + 1 :])  # one pass: no text twice
    assert not set(p.valid.tolist()) & set().union(*unlabelled)  # validation texts are never trained on
    assert p.valid.min() >= 3 and len(p.valid) == 20  # a tenth of the unlabelled texts, never a training row
    assert 0.6 < p.passes < 0.7  # 1,200 of the 1,800 tokens left after validation


def test_texts_fewer_than_the_budget_wrap_around_and_fewer_than_a_share_are_read_whole():
    lengths = np.array([10] * 101)
    p = plan(lengths, n_always=1, epochs=6, budget=1800, seed=1)  # 90 texts, 300 tokens an epoch: 2 passes
    assert p is not None and p.passes == 2.0
    seen = np.concatenate([part[1:] for part in p.parts])
    assert np.bincount(seen)[seen].min() == 2
    assert plan(lengths, n_always=1, epochs=6, budget=6000, seed=1) is None  # a share holds every text
    assert plan(lengths, n_always=1, epochs=6, budget=0, seed=1) is None  # no budget: every epoch reads all


def test_validation_texts_are_capped_and_the_plan_is_seeded():
    lengths = np.array([1000] * 3000)
    p = plan(lengths, n_always=0, epochs=2, budget=1_000_000, seed=3)
    assert lengths[p.valid].sum() <= VALID_MAX_TOKENS
    q = plan(lengths, n_always=0, epochs=2, budget=1_000_000, seed=3)
    assert all((a == b).all() for a, b in zip(p.parts, q.parts)) and (p.valid == q.valid).all()
