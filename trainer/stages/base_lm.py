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
INLINE_VALID_PCT = 0.1  # of an inline base LM's texts held out for its validation loss


def fetch(bucket, lang: str, lm: BaseLM, models: Path) -> None:
    """weights.pth and vocab.pkl of `lm` (and its backward weights) into `models/`."""
    for name in ("weights.pth", "vocab.pkl", *([store.BWD_WEIGHTS] if lm.backward else [])):
        bucket.download(store.prefix(lang, lm.id) + name, models / name)


def wanted_id(rc, resume) -> str | None:
    """An lm id, `current`/`pretrain-inline`, or None (no base LM): what the run asks for, or what it
    chose before an interruption (the same one, even if CURRENT moved since)."""
    payload = resume.payload if resume is not None else {}
    if "base_lm" in payload:
        return payload["base_lm"]
    return None if rc.a.base_lm == NONE else rc.a.base_lm


def sentencepiece_of(rc, resume, code: str):
    """The SentencePiece TokenizerSpec of the base LM the run will use, if it was trained with one."""
    from trainer.text.tokenizers import SENTENCEPIECE, TokenizerSpec

    bucket, lang = rc.bucket, rc.a.lang
    wanted = wanted_id(rc, resume)
    lm_id = store.current_id(bucket, lang) if wanted in (CURRENT, INLINE) else wanted
    lm = store.read(bucket, lang, lm_id) if lm_id else None
    key = store.prefix(lang, lm.id) + store.SP_MODEL if lm else None
    if lm is None or not lm.tokenizer.startswith(SENTENCEPIECE) or not bucket.exists(key):
        return None
    spec = TokenizerSpec(SENTENCEPIECE, code, bucket.read_bytes(key))
    return spec if spec.id == lm.tokenizer else None


def choose(rc, resume, tokenizer) -> tuple[BaseLM | None, str]:
    """(the base LM this run fine-tunes from or None, why), without downloading anything."""
    a, bucket = rc.a, rc.bucket
    wanted = wanted_id(rc, resume)
    if wanted is None:
        return None, "none before the interruption" if a.base_lm != NONE else "trainer.base_lm: none"
    lm_id = store.current_id(bucket, a.lang) if wanted in (CURRENT, INLINE) else wanted
    lm = store.read(bucket, a.lang, lm_id) if lm_id else None
    if wanted not in (CURRENT, INLINE) and lm is None:
        ids = ", ".join(m.id for m in store.list_lms(bucket, a.lang)) or "none"
        raise DataError(
            f"no base LM {wanted!r} for {a.lang} (published: {ids})",
            hint=f"trainctl lm list {a.lang}; or set trainer.base_lm: current",
        )
    if lm is None:
        return None, f"no base LM published for {a.lang}"
    if lm.tokenizer != tokenizer.id and not _legacy_spacy_match(lm, tokenizer):
        message = f"base LM {lm.id} was made with tokenizer {lm.tokenizer}, this run tokenizes with {tokenizer.id}"
        if wanted not in (CURRENT, INLINE):
            raise DataError(message, hint="set trainer.tokenizer to match it, or pick another base LM")
        return None, message
    return lm, "CURRENT" if lm_id != wanted else "trainer.base_lm"


def _legacy_spacy_match(lm: BaseLM, tokenizer) -> bool:
    # LMs from before tokenizers were recorded are spaCy ones: same words, older case rules
    return lm.source == store.LEGACY_ID and lm.tokenizer.startswith("fastai-spacy") and tokenizer.kind == "spacy"


def stage(rc, fit, prep) -> BaseLM | None:
    """Runs the base-LM stage: fetches the chosen LM into models/, or pretrains one inline; returns
    what the run fine-tunes from (None: random weights)."""
    a = rc.a
    lm, why = choose(rc, fit.resume, prep.tokenizer)
    if lm is not None:
        return _use(rc, fit, lm, why)
    if a.base_lm != INLINE:
        rc.stage("base_lm")
        rc.log.line(
            f"warning: no base LM ({why}): the LM is fine-tuned from random weights, "
            f"expect weak transfer (trainctl lm pretrain {a.lang}, or lm import)"
        )
        return None
    if why.startswith("base LM"):
        rc.log.line(f"warning: {why}: pretraining one inline")
    own = store.read(rc.bucket, a.lang, inline_id(rc, fit, prep))
    if own is not None:  # this data, split and settings were pretrained before: the same LM
        return _use(rc, fit, own, "pretrained inline before on the same training rows")
    if not why.startswith("base LM"):
        rc.log.line(
            f"base LM: {why} (no {a.lang}/lm/CURRENT): pretraining one inline on the corpus and the "
            f"training rows (trainctl lm pretrain {a.lang} makes one every run reuses)"
        )
    return pretrain_inline(rc, fit, prep)


def _use(rc, fit, lm: BaseLM, why: str) -> BaseLM:
    """Fetches `lm` into models/ and says so (with a warning when it is small)."""
    fetch(rc.bucket, rc.a.lang, lm, rc.models)
    if lm.arch and lm.arch != fit.arch:
        rc.log.line(f"base LM {lm.id} has arch {lm.arch}; using it (config asked {fit.arch})")
        fit.use_arch(lm.arch)
    rc.stage("base_lm")
    rc.log.line(f"base LM: {lm.describe()} ({why})")
    _warn_if_small(rc, lm)
    return lm


def _warn_if_small(rc, lm: BaseLM) -> None:
    if lm.small:
        rc.log.line(
            f"warning: small base LM: expect weak transfer ({lm.tokens:,} tokens, under "
            f"{store.SMALL_LM_TOKENS:,}; trainctl lm pretrain {rc.a.lang} on a larger corpus)"
        )


def inline_budget(rc, prep) -> tuple[int, int]:
    """(epochs, tokens per epoch) of an inline base LM under trainer.max_lm_tokens (see lm_budget)."""
    from trainer.lm.train import lm_budget

    n = sum(t.n_tokens for t in prep.inline_texts())
    return lm_budget(n * (1 - INLINE_VALID_PCT), rc.a.epochs_base_lm, rc.a.max_lm_tokens)


def inline_id(rc, fit, prep) -> str:
    """An inline LM learns from this run's training rows: its id hashes them (and what else shapes
    the weights), so no run whose validation or test rows it saw can pick it up."""
    from trainer.lm.adaptive import id_part
    from trainer.runtime.precision import cpu_autocast

    a = rc.a
    rows = hashlib.sha256(json.dumps(sorted(prep.train_idx)).encode()).hexdigest()
    shaped_by = [
        prep.data_hash,
        rows,
        prep.tokenizer.id,
        fit.arch,
        a.epochs_base_lm,
        a.seed,
        a.lr_base_lm or a.lr_lm,
        a.bs,
        a.seq_len,
        a.drop_mult,
        a.max_vocab,
        a.min_freq,
    ]
    if a.bidirectional:  # with a backward LM: another id (forward-only ids stay as they were)
        shaped_by.append("bidirectional")
    shaped_by += id_part(fit.lm_head)  # so do full-softmax ones
    if cpu_autocast(rc.precision):  # `auto` is bf16 only on CPUs that have it: fp32 ids stay
        shaped_by.append(["precision", "cpu-bf16"])
    budget = inline_budget(rc, prep)
    if budget != (a.epochs_base_lm, 0):  # trainer.max_lm_tokens cut the training (ids without a cut stay)
        shaped_by.append(["max_lm_tokens", *budget])
    return "inline-" + hashlib.sha256(json.dumps(shaped_by).encode()).hexdigest()[:12]


def pretrain_inline(rc, fit, prep) -> BaseLM:
    """The corpus plus the training rows, `epochs_base_lm` epochs; published under inline_id, never
    as CURRENT (it has seen this run's training rows, which another split may score)."""
    a, models = rc.a, rc.models
    lm_id = inline_id(rc, fit, prep)
    tokens, vocab = _train_inline(rc, fit, prep)
    if a.bidirectional:
        _train_inline(rc, fit, prep, backwards=True, vocab=vocab)
    lm = BaseLM(
        id=lm_id,
        source=INLINE,
        tokenizer=prep.tokenizer.id,
        arch=dict(fit.arch),
        vocab_size=len(vocab),
        tokens=int(tokens),
        corpus_hash=prep.data_hash,
        run_id=a.run_id,
        created_at=store.now(),
        backward=bool(a.bidirectional),
        head=fit.lm_head,
    )
    if rc.ctx.main:
        weights, vocab_bytes = (models / "weights.pth").read_bytes(), (models / "vocab.pkl").read_bytes()
        store.publish(
            rc.bucket,
            a.lang,
            lm,
            weights,
            vocab_bytes,
            make_current=False,
            tokenizer_model=prep.tokenizer.sp_model,
            weights_bwd=(models / store.BWD_WEIGHTS).read_bytes() if a.bidirectional else None,
        )
        rc.log.line(
            f"base LM: published {lm.describe()} to {rc.bucket.url(store.prefix(a.lang, lm.id))} "
            "(runs on the same training rows reuse it)"
        )
    fit.drop_carried("base_lm")  # published: a resumed run fetches it, later checkpoints need not carry it
    _warn_if_small(rc, lm)
    return lm


def _train_inline(rc, fit, prep, *, backwards: bool = False, vocab: list[str] | None = None) -> tuple[int, list[str]]:
    """Pretrains an LM on the corpus, the training rows and unlabelled texts into models/ -> (tokens, vocab).
    The backward one (`backwards`, same `vocab`) reads every text right to left."""
    import pickle

    import torch

    from trainer.lm.adaptive import published_state
    from trainer.lm.train import train_lm
    from trainer.runtime import distributed as D
    from trainer.runtime.fitting import stage_name
    from trainer.text.tokens import TokenIds, build_vocab, remap

    a, stage = rc.a, stage_name("base_lm", backwards)
    texts = prep.inline_texts()  # the user's own unlabelled texts are the best LM text there is
    if vocab is None:
        vocab = build_vocab(texts, min_freq=a.min_freq, max_vocab=a.max_vocab)
        if fit.resume_point(stage) is not None:
            vocab = fit.resume.payload["vocab"]
        elif fit.resumed_past(stage):
            vocab = fit.carry[stage]["vocab"]
    tokens = TokenIds.concat([remap(t, vocab) for t in texts])
    learn = train_lm(
        rc, fit, stage, tokens.reversed() if backwards else tokens, vocab=vocab, valid_pct=INLINE_VALID_PCT
    )
    torch.save(published_state(D.unwrap(learn.model)), rc.models / (store.BWD_WEIGHTS if backwards else "weights.pth"))
    (rc.models / "vocab.pkl").write_bytes(pickle.dumps(list(vocab)))
    D.barrier(rc.ctx)
    return tokens.n_tokens, vocab


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
    from trainer.lm.import_checks import load_vocab

    return load_vocab((models / "vocab.pkl").read_bytes(), str(models / "vocab.pkl"))


def load_weights(learn, models: Path, new_vocab: list[str], *, weights: str = "weights.pth") -> None:
    """fastai's LMLearner.load_pretrained without its unsafe loads (it unpickles both files
    whole): tensors only (`weights_only=True`) and the checked vocabulary, then the same
    embedding matching (rows of words the base LM knows keep their vectors). Under an adaptive
    head only the encoder's weights load: the head is fitted afresh to the task's vocabulary."""
    import torch
    from fastai.text.learner import clean_raw_keys, load_ignore_keys, match_embeds

    from trainer.lm.adaptive import AdaptiveDecoder

    wgts = torch.load(models / weights, map_location="cpu", weights_only=True)
    if "model" in wgts:
        wgts = wgts["model"]
    wgts = clean_raw_keys(match_embeds(wgts, read_vocab(models), list(new_vocab)))
    if isinstance(learn.model[1], AdaptiveDecoder):
        load_ignore_keys(learn.model[0], {k[2:]: v for k, v in wgts.items() if k.startswith("0.")})
    else:
        load_ignore_keys(learn.model, wgts)
    learn.freeze()
