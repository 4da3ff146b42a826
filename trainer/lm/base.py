"""The base-LM stage of a training run: which base LM it fine-tunes from, and the inline pretraining.

`trainer.base_lm` says which: `current` (what `<lang>/lm/CURRENT` names; none published:
no base LM, with a warning), an id, `none`, or `pretrain-inline` (CURRENT when it fits, else
one pretrained on the corpus and this run's training rows — reused by runs on the same rows,
never made CURRENT: the tiny local demo's way).
A base LM made with another tokenizer than the run's is never mixed in.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trainer.errors import DataError
from trainer.lm import store
from trainer.lm.store import BaseLM

CURRENT, NONE, INLINE = "current", "none", "pretrain-inline"


def fetch(bucket, lang: str, lm: BaseLM, models: Path) -> None:
    """weights.pth and vocab.pkl of `lm` (and its backward weights) into `models/`."""
    for name in ("weights.pth", "vocab.pkl", *([store.BWD_WEIGHTS] if lm.backward else [])):
        bucket.download(store.prefix(lang, lm.id) + name, models / name)


def wanted_id(run) -> str | None:
    """An lm id, `current`/`pretrain-inline`, or None (no base LM): what the run asks for, or what it
    chose before an interruption (the same one, even if CURRENT moved since)."""
    payload = run.resume.payload if run.resume is not None else {}
    if "base_lm" in payload:
        return payload["base_lm"]
    return None if run.a.base_lm == NONE else run.a.base_lm


def sentencepiece_of(run, code: str):
    """The SentencePiece TokenizerSpec of the base LM the run will use, if it was trained with one."""
    from trainer.text.tokenizers import SENTENCEPIECE, TokenizerSpec

    wanted = wanted_id(run)
    lm_id = store.current_id(run.bucket, run.a.lang) if wanted in (CURRENT, INLINE) else wanted
    lm = store.read(run.bucket, run.a.lang, lm_id) if lm_id else None
    key = store.prefix(run.a.lang, lm.id) + store.SP_MODEL if lm else None
    if lm is None or not lm.tokenizer.startswith(SENTENCEPIECE) or not run.bucket.exists(key):
        return None
    spec = TokenizerSpec(SENTENCEPIECE, code, run.bucket.read_bytes(key))
    return spec if spec.id == lm.tokenizer else None


def choose(run) -> tuple[BaseLM | None, str]:
    """(the base LM this run fine-tunes from or None, why), without downloading anything."""
    a, bucket = run.a, run.bucket
    wanted = wanted_id(run)
    if wanted is None:
        return None, "none before the interruption" if a.base_lm != NONE else "trainer.base_lm: none"
    lm_id = store.current_id(bucket, a.lang) if wanted in (CURRENT, INLINE) else wanted
    lm = store.read(bucket, a.lang, lm_id) if lm_id else None
    if wanted not in (CURRENT, INLINE) and lm is None:
        ids = ", ".join(m.id for m in store.list_lms(bucket, a.lang)) or "none"
        raise DataError(f"no base LM {wanted!r} for {a.lang} (published: {ids})",
                        hint=f"trainctl lm list {a.lang}; or set trainer.base_lm: current")
    if lm is None:
        return None, f"no base LM published for {a.lang}"
    if lm.tokenizer != run.tokenizer.id and not _legacy_spacy_match(lm, run.tokenizer):
        message = (f"base LM {lm.id} was made with tokenizer {lm.tokenizer}, this run tokenizes with "
                   f"{run.tokenizer.id}")
        if wanted not in (CURRENT, INLINE):
            raise DataError(message, hint="set trainer.tokenizer to match it, or pick another base LM")
        return None, message
    return lm, "CURRENT" if lm_id != wanted else "trainer.base_lm"


def _legacy_spacy_match(lm: BaseLM, tokenizer) -> bool:
    # LMs from before tokenizers were recorded are spaCy ones: same words, older case rules
    return lm.source == store.LEGACY_ID and lm.tokenizer.startswith("fastai-spacy") and tokenizer.kind == "spacy"


def stage(run) -> BaseLM | None:
    """Runs the base-LM stage: fetches the chosen LM, or pretrains inline; returns what the run uses."""
    a = run.a
    lm, why = choose(run)
    if lm is not None:
        return _use(run, lm, why)
    if a.base_lm != INLINE:
        run.stage("base_lm")
        run.log.line(f"warning: no base LM ({why}): the LM is fine-tuned from random weights, "
                     f"expect weak transfer (trainctl lm pretrain {a.lang}, or lm import)")
        return None
    if why.startswith("base LM"):
        run.log.line(f"warning: {why}: pretraining one inline")
    own = store.read(run.bucket, a.lang, inline_id(run))
    if own is not None:  # this data, split and settings were pretrained before: the same LM
        return _use(run, own, "pretrained inline before on the same training rows")
    if not why.startswith("base LM"):
        run.log.line(f"base LM: {why} (no {a.lang}/lm/CURRENT): pretraining one inline on the corpus and the "
                     f"training rows (trainctl lm pretrain {a.lang} makes one every run reuses)")
    return pretrain_inline(run)


def _use(run, lm: BaseLM, why: str) -> BaseLM:
    """Fetches `lm` into models/ and says so (with a warning when it is small)."""
    fetch(run.bucket, run.a.lang, lm, run.work / "models")
    if lm.arch and lm.arch != run.arch:
        run.log.line(f"base LM {lm.id} has arch {lm.arch}; using it (config asked {run.arch})")
        run.arch = dict(lm.arch)
    run.stage("base_lm")
    run.log.line(f"base LM: {lm.describe()} ({why})")
    _warn_if_small(run, lm)
    return lm


def _warn_if_small(run, lm: BaseLM) -> None:
    if lm.small:
        run.log.line(f"warning: small base LM: expect weak transfer ({lm.tokens:,} tokens, under "
                     f"{store.SMALL_LM_TOKENS:,}; trainctl lm pretrain {run.a.lang} on a larger corpus)")


def inline_id(run) -> str:
    """An inline LM learns from this run's training rows: its id hashes them (and what else shapes
    the weights), so no run whose validation or test rows it saw can pick it up."""
    a = run.a
    rows = hashlib.sha256(json.dumps(sorted(run.train_idx)).encode()).hexdigest()
    shaped_by = [run.data_hash, rows, run.tokenizer.id, run.arch, a.epochs_base_lm, a.seed, a.lr_lm, a.bs, a.seq_len,
                 a.drop_mult, a.max_vocab, a.min_freq]
    if a.bidirectional:  # with a backward LM: another id (forward-only ids stay as they were)
        shaped_by.append("bidirectional")
    budget = run.inline_budget()
    if budget != (a.epochs_base_lm, 0):  # trainer.max_lm_tokens cut the training (ids without a cut stay)
        shaped_by.append(["max_lm_tokens", *budget])
    return "inline-" + hashlib.sha256(json.dumps(shaped_by).encode()).hexdigest()[:12]


def pretrain_inline(run) -> BaseLM:
    """The corpus plus the training rows, `epochs_base_lm` epochs; published under inline_id, never
    as CURRENT (it has seen this run's training rows, which another split may score)."""
    a = run.a
    models = run.work / "models"
    lm_id = inline_id(run)
    tokens, vocab = run.pretrain_base_lm()
    if a.bidirectional:
        run.pretrain_base_lm(backwards=True, vocab=vocab)
    lm = BaseLM(id=lm_id, source=INLINE, tokenizer=run.tokenizer.id, arch=dict(run.arch), vocab_size=len(vocab),
                tokens=int(tokens), corpus_hash=run.data_hash, run_id=a.run_id, created_at=store.now(),
                backward=bool(a.bidirectional))
    if run.ctx.main:
        weights, vocab_bytes = (models / "weights.pth").read_bytes(), (models / "vocab.pkl").read_bytes()
        store.publish(run.bucket, a.lang, lm, weights, vocab_bytes, make_current=False,
                      tokenizer_model=run.tokenizer.sp_model,
                      weights_bwd=(models / store.BWD_WEIGHTS).read_bytes() if a.bidirectional else None)
        run.log.line(f"base LM: published {lm.describe()} to {run.bucket.url(store.prefix(a.lang, lm.id))} "
                     "(runs on the same training rows reuse it)")
    run.carry.pop("base_lm", None)  # published: a resumed run fetches it, later checkpoints need not carry it
    _warn_if_small(run, lm)
    return lm


def finetune_vocab(task_vocab: list[str], base_vocab: list[str] | None, max_vocab: int) -> list[str]:
    """The task's vocabulary, then the base LM's other words up to max_vocab (so words unseen in
    the labelled data keep their pretrained embeddings at prediction time); padded to a multiple of 8."""
    words = [w for w in task_vocab if w != "xxfake"]
    if base_vocab:
        seen = set(words)
        room = max(0, max_vocab - len(words))
        words += [w for w in base_vocab if w not in seen and w != "xxfake"][:room]
    return words + ["xxfake"] * (-len(words) % 8)


def read_vocab(models: Path) -> list[str]:
    """The base LM's vocabulary, read by an unpickler that admits lists and strings only."""
    from trainer.lm.importer import load_vocab

    return load_vocab((models / "vocab.pkl").read_bytes(), str(models / "vocab.pkl"))


def load_weights(learn, models: Path, new_vocab: list[str], *, weights: str = "weights.pth") -> None:
    """fastai's LMLearner.load_pretrained without its unsafe loads (it unpickles both files
    whole): tensors only (`weights_only=True`) and the checked vocabulary, then the same
    embedding matching (rows of words the base LM knows keep their vectors)."""
    import torch
    from fastai.text.learner import clean_raw_keys, load_ignore_keys, match_embeds

    wgts = torch.load(models / weights, map_location="cpu", weights_only=True)
    if "model" in wgts:
        wgts = wgts["model"]
    wgts = match_embeds(wgts, read_vocab(models), list(new_vocab))
    load_ignore_keys(learn.model, clean_raw_keys(wgts))
    learn.freeze()
