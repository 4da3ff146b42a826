"""ULMFiT's second stage: the base LM fine-tuned on the training rows (and unlabelled in-domain texts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.classification.recipe import lm_finetune_phases
from trainer.lm.parts import plan
from trainer.lm.store import BWD_WEIGHTS, BaseLM
from trainer.lm.train import lm_learner
from trainer.runtime import distributed as D
from trainer.runtime.checkpoints import Position
from trainer.runtime.fitting import stage_name
from trainer.stages.base_lm import finetune_vocab, read_vocab
from trainer.stages.base_lm import load_weights as load_base_weights
from trainer.text.tokens import TokenIds, build_vocab, remap


@dataclass(frozen=True)
class Encoder:
    """A fine-tuned LM's encoder (models/ft_enc*.pth) and the vocabulary the classifier reads with."""

    vocab: list[str]
    path: Path
    backwards: bool = False

    @property
    def name(self) -> str:
        """What fastai's load_encoder takes (a file under models/, without .pth)."""
        return self.path.stem


def finetune(rc, fit, prep, base: BaseLM | None, *, backwards: bool = False, vocab: list[str] | None = None) -> Encoder:
    """Fine-tunes the base LM (its backward one with `backwards`, on the forward one's `vocab`) on the
    training rows -> the encoder, or the one an interrupted run already finished."""
    a, log = rc.a, rc.log
    stage = stage_name("lm_finetune", backwards)
    path = rc.models / f"{stage_name('ft_enc', backwards)}.pth"
    if fit.resumed_past(stage):
        log.line(f"{stage}: finished before the interruption; a later checkpoint has its results")
        return Encoder(fit.resume.payload["vocab"], path, backwards)
    at = fit.resume_point(stage)
    if at is not None and at.done:
        torch.save(fit.resume.payload["encoder"], path)
        log.line(f"{stage}: finished before the interruption; reusing its encoder")
        return Encoder(fit.resume.payload["vocab"], path, backwards)
    rc.stage(stage, a.epochs_lm)
    # The LM learns the task's language from the training rows (and unlabelled in-domain texts)
    # only: validation and test texts stay unseen until they are scored.
    train_texts = prep.texts.select(prep.train_idx)
    parts = None
    if prep.domain is not None:
        train_texts = TokenIds.concat([train_texts, prep.domain])
        parts = plan(train_texts.lengths(), len(prep.train_idx), a.epochs_lm, a.max_lm_tokens, a.seed)
    if at is not None:
        vocab = fit.resume.payload["vocab"]
    elif vocab is None:  # the forward LM's; the backward models share it
        base_vocab = read_vocab(rc.models) if base is not None else None
        vocab = finetune_vocab(
            build_vocab([train_texts], min_freq=a.min_freq, max_vocab=a.max_vocab), base_vocab, a.max_vocab
        )
        if base_vocab is not None:
            known = len(set(vocab) & set(base_vocab) - {"xxfake"})
            log.line(
                f"vocabulary: {len(vocab)} entries, {known} found an embedding in base LM "
                f"{base.id} ({len(base_vocab)} entries)"
            )
    fit.use_vocab(vocab)
    tokens = remap(train_texts, vocab)
    if parts is not None:
        log.line(f"{stage}: " + parts.describe([int(train_texts.lengths()[p].sum()) for p in parts.parts]))
    learn = lm_learner(rc, fit, tokens.reversed() if backwards else tokens, parts=parts)
    if base is not None and (base.backward or not backwards):
        load_base_weights(learn, rc.models, vocab, weights=BWD_WEIGHTS if backwards else "weights.pth")
    elif base is not None:
        log.line(
            f"warning: base LM {base.id} has no backward LM: the backward LM starts from random "
            f"weights (trainctl lm pretrain {a.lang} with trainer.bidirectional: true)"
        )
    learn = fit.setup(learn)
    fit.fit_phases(learn, stage, lm_finetune_phases(a.lr_lm, a.epochs_lm), last_saves_done=False)
    encoder = D.unwrap(learn.model)[0].state_dict()
    torch.save(encoder, path)  # on every rank (fastai's save_encoder skips ranks > 0)
    fit.save_checkpoint(None, Position(stage, done=True), [], encoder=encoder)
    return Encoder(vocab, path, backwards)
