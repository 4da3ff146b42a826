"""Exact resume: a fit put back where its checkpoint left it (RNG states, batch, an LM's hidden state)."""

from __future__ import annotations

from fastai.callback.core import Callback, CancelBatchException, TrainEvalCallback
from fastai.learner import Recorder

from trainer.runtime import distributed as D
from trainer.runtime.checkpoints import set_rng_state


def _lm_encoder(learn):
    """The AWD-LSTM of a language model, whose hidden state runs on from batch to batch (None otherwise:
    a classifier's encoder starts every batch afresh)."""
    from fastai.text.models.awdlstm import AWD_LSTM

    model = D.unwrap(learn.model)
    encoder = model[0] if len(model) else None
    return encoder if isinstance(encoder, AWD_LSTM) else None


def lm_hidden(learn) -> list | None:
    """A language model's LSTM hidden state (on the CPU), which a mid-epoch checkpoint must keep."""
    encoder = _lm_encoder(learn)
    if encoder is None:
        return None
    return [tuple(t.detach().cpu().clone() for t in layer) for layer in encoder.hidden]


class ResumeCallback(Callback):
    """Puts a resumed fit exactly where the checkpoint left it: RNG states, the batch position and a
    language model's hidden state."""

    run_after, run_before = TrainEvalCallback, Recorder  # pct_train is set for the epoch; no batch recorded yet

    def __init__(
        self, epoch: int, batch: int, rng_epoch: dict | None, rng_now: dict | None, hidden: list | None = None
    ):
        self.epoch_at, self.batch_at, self.rng_epoch, self.rng_now = epoch, batch, rng_epoch, rng_now
        self.hidden = hidden
        self.active = True

    def before_train(self):
        if self.active and self.epoch == self.epoch_at and self.rng_epoch is not None:
            set_rng_state(self.rng_epoch)  # the same shuffle as the interrupted epoch

    def before_batch(self):
        if not (self.active and self.training and self.epoch == self.epoch_at):
            return
        if self.iter < self.batch_at:
            self.learn.yb = ()  # Recorder ignores the batch; TrainEvalCallback still advances the schedule
            raise CancelBatchException()
        # Mid-epoch: the dropout masks of an uninterrupted run from here on. At an epoch's start the
        # epoch's state (before_train) is already right: the loader has since drawn its order and
        # seed from it, as in the uninterrupted run; restoring it again would undo those draws.
        if self.rng_now is not None and self.batch_at:
            set_rng_state(self.rng_now)
        encoder = _lm_encoder(self.learn)
        # Mid-epoch only (at an epoch's start the LM starts afresh, as ModelResetter has just made it),
        # and for the batch size the state was saved with.
        bs = self.hidden[0][0].shape[1] if self.hidden else None
        if self.batch_at and encoder is not None and bs == self.learn.dls.train.bs:
            param = next(encoder.parameters())  # the LM reads on from where the text stopped
            encoder.hidden = [tuple(t.to(param.device, dtype=param.dtype) for t in layer) for layer in self.hidden]
            encoder.bs = bs
        self.active = False

    def after_train(self):
        # Saved after the epoch's last batch: no batch is left to restore the state at, and
        # the next epoch must start from the state the uninterrupted run had here.
        if self.active and self.epoch == self.epoch_at:
            if self.rng_now is not None:
                set_rng_state(self.rng_now)
            self.active = False

    def after_epoch(self):
        if self.epoch >= self.epoch_at:
            self.active = False
