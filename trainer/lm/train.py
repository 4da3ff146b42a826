"""Training an AWD-LSTM language model over token ids: the learner, and a base LM's budgeted fit."""

from __future__ import annotations

from fastai.callback.core import Callback
from fastai.text.all import (
    AWD_LSTM,
    LMLearner,
    Perplexity,
    accuracy,
    awd_lstm_lm_config,
    awd_lstm_lm_split,
    language_model_learner,
)

from trainer.lm import adaptive
from trainer.lm.parts import PartPlan
from trainer.runtime import distributed as D
from trainer.runtime import precision as P
from trainer.text.loaders import lm_dataloaders, lm_part_dataloaders
from trainer.text.tokens import TokenIds


def lm_budget(train_tokens: float, epochs: int, max_tokens: int) -> tuple[int, int]:
    """(epochs, tokens per epoch or 0 for all) of a base-LM pretrain within `max_tokens` (0: no cap):
    fewer epochs first; one epoch over a corpus larger than the cap reads `max_tokens` of it."""
    if not max_tokens or epochs * train_tokens <= max_tokens:
        return epochs, 0
    if train_tokens <= max_tokens:
        return max(1, int(max_tokens // train_tokens)), 0
    return 1, int(max_tokens)


def lm_learner(
    rc, fit, tokens: TokenIds, *, valid_pct: float = 0.1, max_train_tokens: int = 0, parts: PartPlan | None = None
):
    """An AWD-LSTM language model over `tokens` (ids into their vocab), seeded; not yet `setup`.
    Its head is the run's (fit.lm_head): fastai's tied full softmax, or an adaptive softmax whose
    clusters follow the tokens' frequencies (trainer.lm.adaptive). With `parts`, each epoch trains on
    its own part of the documents (trainer.lm.parts)."""
    a = rc.a
    P.seed_everything(a.seed + rc.ctx.rank, deterministic=a.deterministic)
    part_loaders = None
    if parts is not None:
        dls, part_loaders = lm_part_dataloaders(
            tokens, parts.parts, parts.valid, bs=a.bs, seq_len=a.seq_len, rank=rc.ctx.rank, world=rc.ctx.world
        )
    else:
        dls = lm_dataloaders(
            tokens,
            bs=a.bs,
            seq_len=a.seq_len,
            seed=a.seed,
            valid_pct=valid_pct,
            rank=rc.ctx.rank,
            world=rc.ctx.world,
            max_train_tokens=max_train_tokens,
        )
    config = {**awd_lstm_lm_config, **fit.arch}
    if fit.lm_head == adaptive.FULL:
        learn = language_model_learner(
            dls,
            AWD_LSTM,
            config=config,
            drop_mult=a.drop_mult,
            pretrained=False,
            path=rc.work,
            metrics=[accuracy, Perplexity()],
        )
    else:
        model = adaptive.language_model(len(tokens.vocab), config, a.drop_mult, tokens.counts())
        rc.log.line(f"LM head: adaptive softmax, {model[1].describe()} (trainer.lm_head)")
        learn = LMLearner(
            dls,
            model,
            loss_func=adaptive.AdaptiveLoss(model[1]),
            splitter=awd_lstm_lm_split,
            path=rc.work,
            metrics=[adaptive.token_accuracy(model[1]), Perplexity()],
        )
    if part_loaders is not None:
        learn.add_cb(EpochPartCallback(part_loaders))
    return learn


def train_lm(rc, fit, stage: str, tokens: TokenIds, *, vocab: list[str], valid_pct: float = 0.1):
    """A base LM over `tokens` trained as `stage`, or the weights it finished with before an
    interruption; a forward one is carried in later checkpoints when a backward one follows."""
    a = rc.a
    epochs, per_epoch = lm_budget(tokens.n_tokens * (1 - valid_pct), a.epochs_base_lm, a.max_lm_tokens)
    rc.stage(stage, epochs)
    if epochs < a.epochs_base_lm or per_epoch:
        rc.log.line(
            f"{stage}: {epochs} epoch(s) of {a.epochs_base_lm} over "
            f"{'a seeded sample of ' + format(per_epoch, ',') if per_epoch else 'all'} of "
            f"{int(tokens.n_tokens * (1 - valid_pct)):,} training tokens "
            f"(trainer.max_lm_tokens {a.max_lm_tokens:,})"
        )
    fit.use_vocab(vocab)
    learn = lm_learner(rc, fit, tokens, valid_pct=valid_pct, max_train_tokens=per_epoch)
    if fit.resumed_past(stage):
        D.unwrap(learn.model).load_state_dict(fit.carry[stage]["model"])
        rc.log.line(f"{stage}: finished before the interruption; using its weights")
        return learn
    learn = fit.setup(learn)
    fit.fit_phases(learn, stage, [(None, epochs, a.lr_base_lm or a.lr_lm)])
    if a.bidirectional and stage == "base_lm":
        fit.keep(stage, learn, vocab)
    return learn


class EpochPartCallback(Callback):
    """Gives each epoch of LM fine-tuning its own part of the texts (the training DataLoader of part `epoch`)."""

    order = -20  # before TrainEvalCallback reads the epoch's batches (and before any other callback sees them)

    def __init__(self, loaders: list):
        self.loaders, self.offset = loaders, 0

    def begin_phase(self, phase) -> None:
        self.offset = phase.offset

    def before_epoch(self):
        self.learn.dls.loaders[0] = self.loaders[(self.offset + self.epoch) % len(self.loaders)]
