"""fastai's per-batch Python, leaner: its event call and the callbacks of its own that run every batch, with the same
calls, state and arithmetic (trainer.runtime.loop.apply installs them)."""

from __future__ import annotations

from fastai.callback.core import TrainEvalCallback
from fastai.callback.rnn import RNNCallback
from fastai.learner import Learner
from fastcore.foundation import L
from fastcore.xtras import is_listy

FASTAI_EVENTS = Learner.__call__  # fastai's own, before trainer.runtime.loop.apply replaces it


def call_events(learn, event_name) -> None:
    """fastai's `Learner.__call__` (an event's name, or a list of them, to `_call_one`) without building an `L` and
    mapping over it for every single event: 10 us each, eight events a training batch."""
    if type(event_name) is str:
        learn._call_one(event_name)
    else:
        L(event_name).map(learn._call_one)


class LeanTrainEval(TrainEvalCallback):
    """fastai's TrainEvalCallback, a training batch counted from the learner's attributes read directly (its own
    lookup falls back to the learner's through fastcore's delegation: microseconds each): the same arithmetic."""

    @property
    def name(self) -> str:
        return "train_eval"  # learn.train_eval, as fastai names it

    def after_batch(self):
        learn = self.learn
        learn.pct_train += 1.0 / (learn.n_iter * learn.n_epoch)
        learn.train_iter += 1


class LeanRNNCallback(RNNCallback):
    """fastai's RNNCallback, the model's outputs split from the learner's `pred` read directly and kept without
    fastai's check that a callback's attribute does not shadow the learner's (a failed lookup through the model)."""

    @property
    def name(self) -> str:
        return "rnn"  # learn.rnn, which RNNRegularizer reads

    def after_pred(self):
        learn = self.learn
        learn.pred, raw_out, out = [o[-1] if is_listy(o) else o for o in learn.pred]
        self.__dict__["raw_out"], self.__dict__["out"] = raw_out, out


LEAN = {TrainEvalCallback: LeanTrainEval, RNNCallback: LeanRNNCallback}


def lean_callbacks(learn) -> None:
    """fastai's own callbacks of `learn` that run every batch, as their lean versions (the same state, kept)."""
    for cb in learn.cbs:
        lean = LEAN.get(type(cb))
        if lean is not None:
            object.__setattr__(cb, "__class__", lean)  # a Callback's own setattr warns of learn's
