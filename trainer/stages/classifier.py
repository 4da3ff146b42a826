"""ULMFiT's third stage: the classifier on the fine-tuned encoder, unfrozen gradually."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fastai.text.all import (
    AWD_LSTM,
    F1Score,
    F1ScoreMulti,
    accuracy,
    accuracy_multi,
    awd_lstm_clas_config,
    text_classifier_learner,
)

from trainer.classification.probe import Probe, fine_tuning_confirmed, fit_probe, install, linear_head, pooled_features
from trainer.classification.recipe import WEIGHT_POWER, classifier_epochs, classifier_phases, label_weights
from trainer.runtime import distributed as D
from trainer.runtime import precision as P
from trainer.runtime.fitting import stage_name
from trainer.stages.lm_finetune import Encoder
from trainer.text.loaders import classifier_dataloaders
from trainer.text.tokens import TokenIds, remap


@dataclass(frozen=True)
class TrainedClassifier:
    """A trained classifier (rank 0 evaluates and exports it) with the DataLoaders and ids it read."""

    learn: object  # fastai Learner, the run's callbacks removed
    dls: object
    tokens: TokenIds  # every labelled row in the classifier's vocabulary (reversed for a backward one)
    vocab: list[str]
    backwards: bool = False
    best_epoch: dict | None = (
        None  # {"epoch", "of", "valid_loss"}: the epoch whose weights were kept (trainer.best_epoch)
    )
    probe: dict | None = None  # the linear probe the head started from (start_from_probe), with its probabilities


def weighted_loss(a, data, train_idx: list[int], dls, log):
    """The classifier's loss with trainer.class_weights (None: fastai's default for the labels)."""
    import torch
    from fastai.text.all import BCEWithLogitsLossFlat, CrossEntropyLossFlat

    names = data.label_names
    targets = [[int(l in data.labels[i]) for l in names] for i in train_idx]
    weights = label_weights(targets, multi_label=data.multi_label, how=a.class_weights)
    if weights is None:
        return None
    w = torch.tensor(weights, dtype=torch.float32, device=dls.device)
    log.line(f"class weights ({a.class_weights}): " + ", ".join(f"{l}={x:.2f}" for l, x in zip(names, weights)))
    return BCEWithLogitsLossFlat(pos_weight=w) if data.multi_label else CrossEntropyLossFlat(weight=w)


def train_classifier(rc, fit, prep, encoder: Encoder) -> TrainedClassifier:
    """The classifier on `encoder`; the backward one (a backward encoder) reads every text right to left."""
    a, backwards = rc.a, encoder.backwards
    stage = stage_name("classifier", backwards)
    rc.stage(stage, a.epochs_clf)
    fit.use_vocab(encoder.vocab)
    P.seed_everything(a.seed + rc.ctx.rank, deterministic=a.deterministic)
    tokens = remap(prep.texts, encoder.vocab)
    tokens = tokens.reversed() if backwards else tokens
    data = prep.data
    dls = classifier_dataloaders(
        tokens,
        data.labels,
        multi_label=data.multi_label,
        label_names=data.label_names,
        splits=(prep.train_idx, prep.valid_idx),
        bs=a.bs,
        seq_len=a.seq_len,
        rank=rc.ctx.rank,
        world=rc.ctx.world,
    )
    learn = _learner(rc, fit, prep, dls)
    best = _trained(rc, fit, prep, learn, dls, encoder, tokens, stage)
    # Evaluation is rank 0's alone: no more collectives (get_preds fires before_fit too).
    fit.detach(learn)
    probe = fit.carry.get(f"{stage}_probe")
    if best and best["epoch"] > 0 and probe is not None and probe.get("head") is not None:
        best = confirm_over_probe(rc, fit, learn, dls, prep, probe, best, stage)
    fit.drop_carried(f"{stage}_start_encoder")
    if a.bidirectional and not backwards:
        fit.keep(stage, learn, encoder.vocab, best)
    return TrainedClassifier(learn, dls, tokens, encoder.vocab, backwards, best, probe)


def _learner(rc, fit, prep, dls):
    """fastai's AWD-LSTM classifier on `dls`, its head a single linear layer (the probe's shape), set up for
    the run (trainer.runtime.fitting)."""
    a, data = rc.a, prep.data
    metrics = (
        [accuracy_multi, F1ScoreMulti(average="macro")] if data.multi_label else [accuracy, F1Score(average="macro")]
    )
    learn = text_classifier_learner(
        dls,
        AWD_LSTM,
        config={**awd_lstm_clas_config, **fit.arch},
        drop_mult=a.drop_mult,
        pretrained=False,
        seq_len=a.seq_len,
        path=rc.work,
        metrics=metrics,
        loss_func=weighted_loss(a, data, prep.train_idx, dls, rc.log),
        lin_ftrs=[],
    )
    linear_head(learn.model)
    return fit.setup(learn)


def _trained(rc, fit, prep, learn, dls, encoder: Encoder, tokens: TokenIds, stage: str) -> dict | None:
    """The stage's weights in `learn`: those it finished with before an interruption, else fine-tuned (from
    where it stopped) -> the best epoch's record (trainer.best_epoch; None without it)."""
    a, log = rc.a, rc.log
    at = fit.resume_point(stage)
    if fit.resumed_past(stage):
        D.unwrap(learn.model).load_state_dict(fit.carry[stage]["model"])
        log.line(f"{stage}: finished before the interruption; using its weights")
        return fit.carry[stage].get("best")
    if at is not None and at.done:
        D.unwrap(learn.model).load_state_dict(fit.resume.payload["model"])
        log.line(f"{stage}: finished before the interruption; evaluating its checkpoint")
        return (
            fit.restore_best(learn, stage, classifier_epochs(a.epochs_clf, len(dls.train), a.min_clf_steps))
            if a.best_epoch
            else None
        )
    return _fine_tuned(rc, fit, prep, learn, dls, encoder, tokens, stage, fresh=at is None)


def _fine_tuned(
    rc, fit, prep, learn, dls, encoder: Encoder, tokens: TokenIds, stage: str, *, fresh: bool
) -> dict | None:
    """Gradual unfreezing from the encoder (and the probe's head, trainer.probe_head), or from the stage's
    checkpoint when not `fresh` -> the best epoch's record."""
    a, log = rc.a, rc.log
    best = None
    fitted_head = a.probe_head  # a resumed stage keeps its phases: the setting, not whether it ran now
    if fresh:
        learn.load_encoder(encoder.name)
        if fitted_head:
            start_from_probe(rc, fit, prep, learn, tokens, stage)
    epochs = classifier_epochs(a.epochs_clf, len(dls.train), a.min_clf_steps)
    if fitted_head and len(prep.valid_idx) < a.min_valid_rows:
        probe = fit.carry[f"{stage}_probe"]
        log.line(
            f"{stage}: {len(prep.valid_idx)} validation rows cannot tell a fine-tuned epoch from the probe "
            f"(fewer than trainer.min_valid_rows {a.min_valid_rows}): the probe's head is kept, no fine-tuning"
        )
        fit.drop_carried(f"{stage}_best")
        best = {"epoch": 0, "of": 0, "valid_loss": probe["valid_loss"]}
        epochs = 0
    if epochs and epochs != a.epochs_clf:
        log.line(
            f"{stage}: {epochs} epochs instead of {a.epochs_clf}: {len(dls.train)} batches "
            f"per epoch, and at least {a.min_clf_steps} steps are taken (trainer.min_clf_steps)"
        )
        rc.stage(stage, epochs)
    if epochs:
        # AWD-LSTM classifier layer groups: embedding, each LSTM layer, head.
        phases = classifier_phases(a.lr, epochs, n_groups=fit.arch["n_layers"] + 2, head_fitted=fitted_head)
        fit.fit_phases(
            learn, stage, phases, metrics="multi" if prep.data.multi_label else "single", keep_best=a.best_epoch
        )
        best = fit.restore_best(learn, stage, epochs) if a.best_epoch else None
    return best


def _encoder_module(learn):
    """The AWD-LSTM inside the classifier's SentenceEncoder (what fastai's load_encoder loads into)."""
    encoder = D.unwrap(learn.model)[0]
    return getattr(encoder, "module", encoder)


def confirm_over_probe(rc, fit, learn, dls, prep, probe: dict, best: dict, stage: str) -> dict:
    """The fine-tuned epoch stays only when its validation loss is clearly below the probe head's, row by row
    (probe.fine_tuning_confirmed); else the encoder before fine-tuning and the probe's head come back."""
    import numpy as np

    data = prep.data
    targets = np.array([[int(l in data.labels[i]) for l in data.label_names] for i in prep.valid_idx], dtype=float)
    probs, _ = learn.get_preds(dl=dls.valid)  # reordered to the validation rows' order
    confirmed, gain = fine_tuning_confirmed(
        probe["valid_probs"], probs.float().numpy(), targets, multi_label=data.multi_label
    )
    rows = len(prep.valid_idx)
    if confirmed:
        rc.log.line(
            f"{stage}: epoch {best['epoch']} clearly beats the probe's head on the {rows} validation rows "
            f"(mean gain {gain:.4f} per row, 90 % bound above zero): kept"
        )
        return best
    start = fit.carry.get(f"{stage}_start_encoder")
    if start is None:  # a checkpoint from before this rule: nothing to come back to
        rc.log.line(
            f"{stage}: epoch {best['epoch']} is not clearly better than the probe's head (mean gain "
            f"{gain:.4f} per row), but the encoder before fine-tuning was not kept: the epoch stays"
        )
        return best
    _encoder_module(learn).load_state_dict(start)
    install(D.unwrap(learn.model)[1], Probe(**probe["head"]))
    rc.log.line(
        f"{stage}: epoch {best['epoch']} is not clearly better than the probe's head on the {rows} "
        f"validation rows (mean gain {gain:.4f} per row, 90 % bound not above zero): the probe's head on "
        "the encoder before fine-tuning is kept"
    )
    return {"epoch": 0, "of": best["of"], "valid_loss": probe["valid_loss"], "unconfirmed_epoch": best["epoch"]}


def start_from_probe(rc, fit, prep, learn, tokens: TokenIds, stage: str) -> None:
    """Fits the linear probe on the loaded encoder's pooled states of the training rows, writes it into
    the head, and records its validation loss as the stage's epoch 0 (trainer.classification.probe)."""
    import numpy as np
    import torch

    a, data = rc.a, prep.data
    model = D.unwrap(learn.model)
    targets = np.array([[int(l in data.labels[i]) for l in data.label_names] for i in range(len(data.labels))])
    feats = {
        name: pooled_features(model, tokens, rows, bs=a.bs, seq_len=a.seq_len)
        for name, rows in (("train", prep.train_idx), ("valid", prep.valid_idx), ("test", prep.test_idx))
    }
    probe = fit_probe(
        feats["train"],
        targets[prep.train_idx],
        multi_label=data.multi_label,
        seed=a.seed,
        loss_power=WEIGHT_POWER[a.class_weights],
    )
    install(model[1], probe)
    logits = torch.as_tensor(probe.logits(feats["valid"]), dtype=torch.float32)
    y = torch.as_tensor(targets[prep.valid_idx] if data.multi_label else targets[prep.valid_idx].argmax(axis=1))
    loss = float(learn.loss_func(logits, y.float() if data.multi_label else y))
    rc.log.line(
        f"{stage}: the head starts from a linear probe of the encoder ({probe.describe()} on "
        f"{len(prep.train_idx)} training rows); validation loss {loss:.4f} (epoch 0)"
    )
    if a.best_epoch:
        fit.keep_best_start(learn, stage, loss)
        # The encoder the probe read, carried in the stage's checkpoints: a fine-tuned epoch that is not clearly
        # better comes back to it (confirm_over_probe), after a resume as without one.
        fit.remember(
            f"{stage}_start_encoder",
            {k: v.detach().cpu().clone() for k, v in _encoder_module(learn).state_dict().items()},
        )
    fit.remember(
        f"{stage}_probe",
        {
            "c": probe.c,
            "cv_loss": round(probe.cv_loss, 5),
            "valid_loss": round(loss, 5),
            "valid_probs": probe.probabilities(feats["valid"]).astype(np.float32),
            "test_probs": probe.probabilities(feats["test"]).astype(np.float32) if prep.test_idx else None,
            "head": dataclasses.asdict(probe),
        },
    )  # to come back to when fine-tuning is not clearly better
