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
from fastai.callback.core import Callback, CancelStepException
from fastai.data.load import DataLoader
from fastai.learner import Learner
from fastai.losses import MSELossFlat
from fastai.optimizer import Adam
from fastai.test_utils import RegModel, synth_dbunch, synth_learner
from fastai.torch_core import set_seed

from trainer.runtime import loop
from trainer.runtime.lean import FASTAI_EVENTS
from trainer.text import loaders
from trainer.text.tokens import TokenIds


@pytest.fixture(autouse=True)
def fastais_event_call():
    """Every test starts with fastai's own `Learner.__call__` (loop.apply replaces it for the whole process), so a
    plain learner here is fastai's."""
    Learner.__call__ = FASTAI_EVENTS
    yield
    Learner.__call__ = FASTAI_EVENTS


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
    assert fast or Learner.__call__ is FASTAI_EVENTS
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
    assert (fast.train_iter, fast.pct_train) == (plain.train_iter, plain.pct_train) and fast.train_iter == 12
    assert type(fast.train_eval).__name__ == "LeanTrainEval" and fast.train_eval.name == plain.train_eval.name


class Two(Callback):
    def __init__(self, seen: list):
        self.seen = seen

    def after_create(self):
        self.seen.append("after_create")

    def after_cancel_batch(self):
        self.seen.append("after_cancel_batch")


def test_events_by_name_or_in_a_list_reach_the_callbacks_in_order():
    seen: list = []
    learn = loop.apply(adam_learner(n_trn=6, cbs=[Two(seen)]))
    seen.clear()
    learn("after_cancel_batch")
    learn(["after_create", "after_cancel_batch"])
    assert seen == ["after_cancel_batch", "after_create", "after_cancel_batch"]


def test_the_lean_rnn_callback_splits_the_outputs_as_fastais():
    from fastai.callback.rnn import RNNCallback

    from trainer.runtime.lean import LeanRNNCallback

    pred = (torch.randn(2, 5), [torch.randn(2, 3), torch.randn(2, 3)], [torch.randn(2, 3), torch.randn(2, 3)])
    split = []
    for cls in (RNNCallback, LeanRNNCallback):
        learn, cb = synth_learner(), cls()
        learn.add_cb(cb)
        learn.pred = pred
        cb.after_pred()
        split.append((learn.pred, cb.raw_out, cb.out))
    assert all(a is b for a, b in zip(*split)) and split[0][1] is pred[1][-1] and split[0][2] is pred[2][-1]
    assert LeanRNNCallback().name == RNNCallback().name


class Phases(Callback):
    """Records each inner-loop event it is called for, as train or valid; stops running after `stop_after`."""

    def __init__(self, seen: list, *, run_train=True, run_valid=True, stop_after: int | None = None):
        self.seen, self.run_train, self.run_valid, self.stop_after = seen, run_train, run_valid, stop_after

    def after_pred(self):
        self.seen.append((type(self).__name__, self.run_train, self.run_valid, self.training))
        if self.stop_after is not None and len(self.seen) >= self.stop_after:
            self.run = False  # until the fit's end, as fastai resets it

    def after_step(self):
        if self.stop_after == -1:
            raise CancelStepException()  # not wrapped: fastai's loop handles it

    def after_fit(self):
        self.seen.append("fit ended")


class Breaks(Callback):
    def after_loss(self):
        raise ValueError("no loss here")


def phases_seen(fast: bool) -> list:
    seen: list = []
    set_seed(0, reproducible=True)
    cbs = [
        Phases(seen, run_valid=False),
        Phases(seen, run_train=False),
        Phases(seen, stop_after=3),
        Phases(seen, stop_after=-1),
    ]
    learn = adam_learner(n_trn=4, cbs=cbs)
    if fast:
        loop.apply(learn)
    learn.fit(2)
    learn.fit(1)  # a callback stopped in the first fit runs again
    return seen


def test_callbacks_run_in_training_or_validation_as_fastai_calls_them_and_errors_name_them():
    assert phases_seen(fast=True) == phases_seen(fast=False)
    learn = adam_learner(n_trn=4, cbs=[Breaks()])
    loop.apply(learn)
    with pytest.raises(ValueError, match="Exception occured in `Breaks` when calling event `after_loss`"):
        learn.fit(1)


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
    """(fast, fastai's) batch pairs of one epoch; each way leaves torch's RNG where the other does (a dropout mask
    drawn after it is the same)."""
    state, rng, torch_rng = random.getstate(), np.random.get_state(), torch.get_rng_state()
    fast = [tuple(t.clone() for t in b) for b in dl]
    after = torch.rand(4)
    random.setstate(state)
    np.random.set_state(rng)
    torch.set_rng_state(torch_rng)
    kept, dl.tokens = dl.tokens, None  # fastai's own way: an item a row, collated, through torch's iterator
    try:
        slow = [tuple(t.clone() for t in b) for b in DataLoader.__iter__(dl)]
    finally:
        dl.tokens = kept
    assert torch.equal(after, torch.rand(4))
    return list(zip(fast, slow, strict=True))


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


def two_labels(ids: TokenIds, *, train: int, seq_len: int, bs: int = 16):
    """Classifier loaders of `ids` with labels a, b alternating: the first `train` rows train, the rest validate."""
    names = ["a", "b"]
    return loaders.classifier_dataloaders(
        ids,
        [[names[i % 2]] for i in range(len(ids))],
        multi_label=False,
        label_names=names,
        splits=(list(range(train)), list(range(train, len(ids)))),
        bs=bs,
        seq_len=seq_len,
    )


def test_classifier_batches_of_long_texts_are_padded_in_smaller_groups_and_are_fastais(monkeypatch):
    from trainer.text import batches as fed

    monkeypatch.setattr(fed, "GROUP_IDS", 16 * 400 * 3)  # three batches of the longest texts a group
    dls = two_labels(tokens(300, (3, 400)), train=250, seq_len=72)
    made = []
    real = fed.FedSortedDL._group
    monkeypatch.setattr(
        fed.FedSortedDL, "_group", lambda dl, chunks, pad: made.append(len(chunks)) or real(dl, chunks, pad)
    )
    assert same(batches(dls.train))
    assert made and max(made) == 3


class Hypers(Callback):
    """The optimizer's hyper-parameters each training batch steps with (after ParamScheduler sets them)."""

    def __init__(self, seen: list):
        self.seen = seen

    def before_step(self):
        self.seen.append([{k: (type(v), v) for k, v in h.items()} for h in self.opt.hypers])


def one_cycle(ours: bool):
    """A 3-epoch one-cycle fit over two parameter groups at discriminative rates: each batch's hyper-parameters and
    the weights."""
    seen: list = []
    set_seed(0, reproducible=True)
    learn = Learner(
        synth_dbunch(n_train=7, bs=2),  # 7 batches an epoch: positions that are not binary fractions
        RegModel(),
        loss_func=MSELossFlat(),
        splitter=lambda m: [[m.a], [m.b]],
        cbs=[Hypers(seen)],
    )
    loop.apply(learn)
    if ours:
        loop.fit_one_cycle(learn, 3, slice(1e-3, 1e-2), pct_start=0.3)
    else:
        learn.fit_one_cycle(3, slice(1e-3, 1e-2), pct_start=0.3)
    return seen, [p.detach().clone() for p in learn.model.parameters()]


def test_the_one_cycle_schedule_gives_every_batch_fastais_hyper_parameters():
    ours, our_weights = one_cycle(ours=True)
    theirs, their_weights = one_cycle(ours=False)
    assert len(ours) == 21 and ours == theirs  # values and their types, every group, every batch
    assert len({str(h[0]["lr"]) for h in ours}) == 21  # the rate moved every batch
    assert all(torch.equal(a, b) for a, b in zip(our_weights, their_weights))


@pytest.mark.parametrize("pct", [0.25, 0.3, 0.1])
def test_the_schedule_on_floats_is_fastais_at_every_position(pct):
    """Positions as TrainEvalCallback accumulates them (1/(n_iter*n_epoch) added per batch), the phase boundary and
    its float neighbours, random ones."""
    from fastai.callback.schedule import combined_cos

    lr = np.array([1e-3 / 2.6**4, 1e-3 / 2.6**2, 1e-3])
    pairs = [
        (combined_cos(pct, lr / 25, lr, lr / 1e5), loop.combined_cos(pct, lr / 25, lr, lr / 1e5)),
        (combined_cos(pct, 0.95, 0.85, 0.95), loop.combined_cos(pct, 0.95, 0.85, 0.95)),
    ]
    positions = [pct, np.nextafter(pct, 0), np.nextafter(pct, 1), 0.0, 1.0, np.nextafter(1, 0)]
    for n_iter, n_epoch in [(3, 2), (7, 3), (97, 1), (250, 2)]:
        pos = 0.0
        for epoch in range(n_epoch):
            pos = epoch / n_epoch
            for _ in range(n_iter):
                positions.append(pos)
                pos += 1.0 / (n_iter * n_epoch)
    positions += np.random.default_rng(0).random(2000).tolist()
    for theirs, ours in pairs:
        for pos in positions:
            a, b = theirs(pos), ours(pos)
            assert type(a) is type(b) and np.array_equal(a, b), pos


def small_classifier(seq_len: int) -> torch.nn.Module:
    from fastai.text.models.awdlstm import AWD_LSTM, awd_lstm_clas_config
    from fastai.text.models.core import get_text_classifier

    torch.manual_seed(0)
    config = {**awd_lstm_clas_config, "emb_sz": 8, "n_hid": 12, "n_layers": 1}
    return get_text_classifier(AWD_LSTM, 500, 2, seq_len=seq_len, config=config, lin_ftrs=[])


def test_the_classifier_encoder_runs_the_rows_fastais_runs():
    """Batches longer than a chunk whose rows start at different chunks: the loader's counts are fastai's, and the
    encoder given them computes fastai's outputs and gradients, dropout included."""
    dls = two_labels(tokens(200, (3, 60)), train=200, seq_len=7)
    theirs, ours = small_classifier(7), small_classifier(7)
    loop.host_rows_encoder(ours)
    assert type(ours[0]) is loop.HostRowsEncoder
    varied = 0
    for x, _ in dls.train:
        rows = x.chunk_rows
        plain = x.as_subclass(torch.Tensor).clone()  # no counts: read as fastai reads them
        assert not hasattr(plain, "chunk_rows")
        assert list(rows) == [int((plain[:, i] != 1).sum()) for i in range(0, plain.shape[1], 7)]
        varied += len(set(rows)) > 1
        outs = []
        for model, xb in ((theirs, plain), (ours, x)):
            torch.manual_seed(1)
            model.train()
            model.zero_grad()
            out = model(xb)[0]
            out.float().pow(2).sum().backward()
            outs.append((out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
        assert torch.equal(outs[0][0], outs[1][0])
        assert all(torch.equal(a, b) for a, b in zip(outs[0][1], outs[1][1]))
    assert varied >= 3
