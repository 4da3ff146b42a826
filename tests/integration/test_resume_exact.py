"""Exact resume at any batch, the epoch's last one included, with the real callbacks on a tiny model.

The end-to-end test (test_trainer) interrupts wherever SIGTERM happens to land; this one
places the interruption on purpose, so every position is covered on every run.
"""

from __future__ import annotations

import copy

import pytest
import torch
from fastai.callback.core import Callback
from fastai.data.core import DataLoaders
from fastai.data.load import DataLoader
from fastai.learner import Learner
from fastai.losses import CrossEntropyLossFlat
from fastai.torch_core import set_seed
from torch import nn

from trainer.runtime import distributed as D
from trainer.runtime import loop
from trainer.runtime.callbacks import CheckpointCallback, Phase, ResumeCallback
from trainer.runtime.checkpoints import set_rng_state
from trainer.runtime.preemption import Preemption

N, BS, EPOCHS = 48, 8, 2  # 6 training batches per epoch


def make_learner() -> Learner:
    data = torch.Generator().manual_seed(0)
    x = torch.randn(N, 8, generator=data)
    items = list(zip(x, (x[:, 0] > 0).long()))
    # No shuffle: fastai's DataLoader keeps its own random.Random, which the trainer's loaders
    # (trainer.text.loaders: order from seed and epoch) do not use; dropout draws from torch's RNG.
    dls = DataLoaders(DataLoader(items, bs=BS, shuffle=False), DataLoader(items, bs=16))
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 2))
    learn = Learner(dls, model, loss_func=CrossEntropyLossFlat())
    learn.remove_cbs([cb for cb in learn.cbs if type(cb).__name__ == "ProgressCallback"])
    return learn


class StopAt(Callback):
    """Sets the SIGTERM flag during training batch `iter` of `epoch`, as the signal handler would."""

    order = 61  # before CheckpointCallback looks at the flag in after_batch

    def __init__(self, preemption: Preemption, epoch: int, iter: int):
        self.preemption, self.at = preemption, (epoch, iter)

    def after_batch(self):
        if self.training and (self.epoch, self.iter) == self.at:
            self.preemption.requested = True


def fit(stop_at=None, resume=None):
    """(final weights, saved checkpoints) of a 2-epoch one-cycle fit, optionally stopped or resumed."""
    set_seed(2)
    ctx = D.Context.from_env()
    preemption = Preemption(ctx)
    saved = []
    learn = loop.apply(make_learner())  # the trainer's loop (trainer.runtime.loop), as every stage runs it
    ckpt = CheckpointCallback(
        ctx,
        preemption,
        lambda lrn, pos, rng: saved.append(
            (pos, {k: v.clone() for k, v in lrn.model.state_dict().items()}, copy.deepcopy(lrn.opt.state_dict()), rng)
        ),
        minutes=0,
    )
    cbs = [ckpt] + ([StopAt(preemption, *stop_at)] if stop_at else [])
    start = 0
    if resume is not None:
        position, weights, opt, rng = resume
        learn.create_opt()
        learn.model.load_state_dict(weights)
        if position.epoch or position.batch:
            learn.opt.load_state_dict(opt)
        cbs.append(ResumeCallback(position.epoch, position.batch, rng[0]["epoch"], rng[0]["now"]))
        start = position.epoch
    ckpt.begin_phase(Phase("classifier", 0, 1, 0, EPOCHS))
    loop.fit_one_cycle(learn, EPOCHS, 1e-2, start_epoch=start, cbs=cbs)
    return {k: v.clone() for k, v in learn.model.state_dict().items()}, saved


@pytest.mark.parametrize("epoch, iter", [(0, 2), (0, 5), (1, 0)])  # (0, 5): the epoch's last batch
def test_interrupted_then_resumed_equals_uninterrupted(epoch, iter):
    whole, _ = fit()
    again, _ = fit()
    assert all(torch.equal(whole[k], again[k]) for k in whole), "the uninterrupted fit itself is not deterministic"
    _, saved = fit(stop_at=(epoch, iter))
    position = saved[-1][0]
    assert (position.epoch, position.batch) == (epoch, iter + 1)
    resumed, _ = fit(resume=saved[-1])
    for name, tensor in whole.items():
        assert torch.equal(tensor, resumed[name]), name


def test_killed_mid_epoch_resumes_from_the_epoch_end_checkpoint_exactly():
    """A SIGKILL or a lost VM saves nothing: the run resumes from the last epoch's checkpoint
    (batch 0), and the loader's draws at the epoch's start must not be undone."""
    whole, saved = fit()
    epoch_end = next(s for s in saved if (s[0].epoch, s[0].batch) == (1, 0))
    resumed, _ = fit(resume=epoch_end)
    for name, tensor in whole.items():
        assert torch.equal(tensor, resumed[name]), name


def test_rng_state_round_trips():
    from trainer.runtime.checkpoints import rng_state

    state = rng_state()
    a = torch.rand(3)
    set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
