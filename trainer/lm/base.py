"""The base-LM stage of a training run: which base LM it fine-tunes from, and the inline pretraining.

`trainer.base_lm` says which: `current` (what `<lang>/lm/CURRENT` names; none published:
no base LM, with a warning), an id, `none`, or `pretrain-inline` (CURRENT when it fits, else
pretrain one on the corpus and the training rows and publish it: the tiny local demo's way).
A base LM made with another tokenizer than the run's is never mixed in.
"""
from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

from trainer.errors import DataError
from trainer.lm import store
from trainer.lm.store import BaseLM

CURRENT, NONE, INLINE = "current", "none", "pretrain-inline"


def fetch(bucket, lang: str, lm: BaseLM, models: Path) -> None:
    """weights.pth and vocab.pkl of `lm` into `models/` (where fastai's pretrained_fnames look)."""
    for name in ("weights.pth", "vocab.pkl"):
        bucket.download(store.prefix(lang, lm.id) + name, models / name)


def choose(run) -> tuple[BaseLM | None, str]:
    """(the base LM this run fine-tunes from or None, why), without downloading anything."""
    a, bucket = run.a, run.bucket
    wanted = a.base_lm
    payload = run.resume.payload if run.resume is not None else {}
    if "base_lm" in payload:  # chosen before the interruption: the same one, even if CURRENT moved
        if payload["base_lm"] is None:
            return None, "none before the interruption"
        wanted = payload["base_lm"]
    if wanted == NONE:
        return None, "trainer.base_lm: none"
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
    models = run.work / "models"
    lm, why = choose(run)
    if lm is not None:
        fetch(run.bucket, a.lang, lm, models)
        if lm.arch and lm.arch != run.arch:
            run.log.line(f"base LM {lm.id} has arch {lm.arch}; using it (config asked {run.arch})")
            run.arch = dict(lm.arch)
        run.stage("base_lm")
        run.log.line(f"base LM: {lm.describe()} ({why})")
        if lm.small:
            run.log.line(f"warning: small base LM: expect weak transfer ({lm.tokens:,} tokens, under "
                         f"{store.SMALL_LM_TOKENS:,}; trainctl lm pretrain {a.lang} on a larger corpus)")
        return lm
    if a.base_lm != INLINE:
        run.stage("base_lm")
        run.log.line(f"warning: no base LM ({why}): the LM is fine-tuned from random weights, "
                     f"expect weak transfer (trainctl lm pretrain {a.lang}, or lm import)")
        return None
    if why.startswith("base LM"):
        run.log.line(f"warning: {why}: pretraining one inline")
    return pretrain_inline(run)


def pretrain_inline(run) -> BaseLM:
    """The corpus plus the training rows, `epochs_base_lm` epochs; published (CURRENT if none yet)."""
    a = run.a
    models = run.work / "models"
    tokens, vocab = run.pretrain_base_lm()
    lm_id = "inline-" + hashlib.sha256(json.dumps(
        [run.data_hash, run.tokenizer.id, run.arch, a.epochs_base_lm, a.seed]).encode()).hexdigest()[:12]
    lm = BaseLM(id=lm_id, source=INLINE, tokenizer=run.tokenizer.id, arch=dict(run.arch), vocab_size=len(vocab),
                tokens=int(tokens), corpus_hash=run.data_hash, run_id=a.run_id, created_at=store.now())
    if run.ctx.main:
        weights, vocab_bytes = (models / "weights.pth").read_bytes(), (models / "vocab.pkl").read_bytes()
        first = store.current_id(run.bucket, a.lang) is None
        store.publish(run.bucket, a.lang, lm, weights, vocab_bytes, make_current=first)
        run.log.line(f"base LM: published {lm.describe()} to {run.bucket.url(store.prefix(a.lang, lm.id))}"
                     + ("; CURRENT now names it" if first else ""))
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
    return list(pickle.loads((models / "vocab.pkl").read_bytes()))
