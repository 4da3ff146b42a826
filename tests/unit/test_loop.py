"""trainer.runtime.loop and the loaders' fast batches: the same numbers as fastai's own loop, faster.

The optimizer, the event dispatch and the device-side metrics must change nothing a run computes (a checkpoint
from either loads in the other; an interrupted run resumes exactly), and the loaders' batches must be fastai's,
element for element, in the same order."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch
from fastai.callback.core import Callback
from fastai.learner import Learner
from fastai.losses import MSELossFlat
from fastai.optimizer import Adam
from fastai.test_utils import RegModel, synth_dbunch, synth_learner
from fastai.torch_core import set_seed

from trainer.runtime import loop
from trainer.text import loaders
from trainer.text.tokens import TokenIds


def tokens(n: int, lengths: tuple[int, int], seed: int = 0) -> TokenIds:
    rng = np.random.default_rng(seed)
    lens = rng.integers(*lengths, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return TokenIds([f"w{i}" for i in range(500)], rng.integers(0, 500, lens.sum()).astype(np.int32), offsets)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(30, 8), torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))


def stepped(opt_func, steps: int = 6, state=None):
    """A model trained by `opt_func` over two parameter groups with their own rates, a scheduled momentum, biases
    without weight decay (as fastai's Learner sets them), and a group frozen for the first steps."""
    m = model()
    groups = [list(m[0].parameters()), [*m[1].parameters(), *m[2].parameters()]]
    opt = opt_func(groups, lr=1e-2)
    opt.set_hypers(lr=np.array([1e-3, 1e-2]))
    for p in (m[1].bias, m[2].weight, m[2].bias):
        opt.state[p]["do_wd"] = False
    if state is not None:
        opt.load_state_dict(state)
    gen = torch.Generator().manual_seed(1)
    for i in range(steps):
        for p in groups[0]:
            p.requires_grad_(i >= 2)
        x = torch.randint(0, 30, (4, 5), generator=gen)
        m(x).pow(2).mean().backward()
        opt.set_hypers(mom=0.95 - 0.02 * i)
        opt.step()
        opt.zero_grad()
    return m, opt


def test_foreach_adam_computes_fastais_adam_bit_for_bit():
    ours, our_opt = stepped(loop.foreach_adam)
    theirs, their_opt = stepped(Adam)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)
    ours_state, theirs_state = our_opt.state_dict(), their_opt.state_dict()
    assert len(ours_state["state"]) == len(theirs_state["state"])
    for mine, fastais in zip(ours_state["state"], theirs_state["state"]):
        assert mine.keys() == fastais.keys()
        for key in mine:
            assert torch.equal(torch.as_tensor(mine[key]), torch.as_tensor(fastais[key])), key


def test_a_checkpoint_of_fastais_adam_resumes_in_foreach_adam():
    _, their_opt = stepped(Adam, steps=3)
    saved = their_opt.state_dict()
    resumed, _ = stepped(loop.foreach_adam, steps=3, state=copy.deepcopy(saved))
    continued, _ = stepped(Adam, steps=3, state=copy.deepcopy(saved))
    assert all(torch.equal(a, b) for a, b in zip(resumed.parameters(), continued.parameters()))


class Events(Callback):
    """Writes every event it sees, in order, with its own name (two of them at different orders)."""

    def __init__(self, name: str, seen: list, order: int):
        self.label, self.seen, self.order = name, seen, order

    def before_batch(self):
        self.seen.append((self.label, "before_batch"))

    def after_loss(self):
        self.seen.append((self.label, "after_loss"))

    def after_epoch(self):
        self.seen.append((self.label, "after_epoch", round(float(self.recorder.log[1]), 6)))


def adam_learner(n_trn: int, cbs: list) -> Learner:
    """fastai's synthetic regression with its default optimizer, fastai's Adam (synth_learner's is SGD)."""
    return Learner(synth_dbunch(n_train=n_trn), RegModel(), loss_func=MSELossFlat(), lr=1e-2, cbs=cbs)


def fitted(fast: bool):
    seen: list = []
    set_seed(0, reproducible=True)
    learn = adam_learner(n_trn=6, cbs=[Events("late", seen, 80), Events("early", seen, -5)])
    if fast:
        loop.apply(learn)
    learn.fit(2)
    return learn, seen


def test_the_fast_loop_sees_the_same_events_losses_and_weights():
    plain, plain_seen = fitted(fast=False)
    fast, fast_seen = fitted(fast=True)
    assert plain_seen and fast_seen == plain_seen  # same events, same order, same epoch losses
    assert fast.recorder.values == plain.recorder.values
    assert all(torch.equal(a, b) for a, b in zip(fast.model.parameters(), plain.model.parameters()))
    assert type(fast.opt) is loop.ForeachAdam


def test_another_optimizer_is_left_as_it_is():
    learn = synth_learner(n_trn=4)  # SGD
    loop.apply(learn)
    learn.fit(1)
    assert type(learn.opt) is not loop.ForeachAdam


def test_an_event_goes_on_reaching_a_callback_added_mid_fit():
    seen: list = []

    class Adds(Callback):
        def after_epoch(self):
            if self.epoch == 0:
                self.learn.add_cb(Events("added", seen, 60))

    learn = adam_learner(n_trn=4, cbs=[Adds()])
    loop.apply(learn)
    learn.fit(2)
    assert ("added", "before_batch") in seen and ("added", "after_epoch", pytest.approx(seen[-1][2])) in seen


def batches(dl) -> list[tuple]:
    state, rng = random.getstate(), np.random.get_state()
    fast = [tuple(t.clone() for t in b) for b in dl]
    random.setstate(state)
    np.random.set_state(rng)
    kept, dl.tokens = dl.tokens, None  # fastai's own way: an item a row, collated
    try:
        slow = [tuple(t.clone() for t in b) for b in dl]
    finally:
        dl.tokens = kept
    return list(zip(fast, slow))


def same(pairs: list[tuple]) -> bool:
    return bool(pairs) and all(
        type(a) is type(b) and a.dtype == b.dtype and torch.equal(a, b)
        for fast, slow in pairs
        for a, b in zip(fast, slow, strict=True)
    )


@pytest.mark.parametrize(("bs", "seq_len", "world"), [(16, 72, 1), (7, 13, 2), (64, 72, 1)])
def test_language_model_batches_are_fastais(bs, seq_len, world):
    dls = loaders.lm_dataloaders(tokens(300, (5, 200)), bs=bs, seq_len=seq_len, seed=3, rank=world - 1, world=world)
    for dl in (dls.train, dls.valid):
        for _ in range(2):  # a second epoch reshuffles the documents
            assert same(batches(dl))


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize(("bs", "seq_len", "world"), [(16, 72, 1), (7, 13, 2)])
def test_classifier_batches_are_fastais(multi_label, bs, seq_len, world):
    names = ["a", "b", "c"]
    targets = [[names[i % 3]] + ([names[(i + 1) % 3]] if multi_label and i % 4 == 0 else []) for i in range(700)]
    dls = loaders.classifier_dataloaders(
        tokens(700, (3, 400)),
        targets,
        multi_label=multi_label,
        label_names=names,
        splits=(list(range(600)), list(range(600, 700))),
        bs=bs,
        seq_len=seq_len,
        rank=world - 1,
        world=world,
    )
    for dl in (dls.train, dls.valid):
        for _ in range(2):
            assert same(batches(dl))
