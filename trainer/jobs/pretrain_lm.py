"""The `pretrain-lm` job (`python -m trainer --job pretrain-lm`): pretrain a base LM on `<lang>/data/corpus/` and
publish it.

The same run machinery as a training run (status, log, checkpoints, exact resume, data
parallel): the corpus is streamed and tokenized once into the bucket's cache, a slice of
its lines is held out for perplexity, and the result is published as
`<lang>/lm/pt-<hash>/` with CURRENT written last. The id hashes the corpus, tokenizer,
arch, epochs and seed: another corpus gives another id, the same inputs the same one.
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import time
from dataclasses import dataclass

from trainer.errors import DataError
from trainer.lm import store
from trainer.lm.store import BaseLM
from trainer.params import Job
from trainer.runtime import distributed as D

VALID_PCT = 0.02  # of corpus lines held out for perplexity (at least one line)


@dataclass(frozen=True)
class Corpus:
    """The corpus as token ids, with the tokenizer that made them and their hash (the checkpoints' identity)."""

    tokenizer: object  # trainer.text.tokenizers.TokenizerSpec
    tables: tuple  # TokenIds per corpus file
    data_hash: str


def prepare(rc, fit) -> Corpus:
    """Corpus tokens (cached) with the run's tokenizer; a SentencePiece model learns from the corpus."""
    from trainer.data.labelled import corpus_keys
    from trainer.text.cache import corpus_tokens, sentencepiece_tokenizer
    from trainer.text.languages import default_tokenizer
    from trainer.text.tokenizers import SPACY, spacy_spec

    a, bucket, log = rc.a, rc.bucket, rc.log
    rc.stage("preparing")
    keys = corpus_keys(bucket, a.lang)
    if not keys:
        raise DataError(
            f"no corpus at {bucket.url(f'{a.lang}/data/corpus/')} (.txt or .txt.gz, one text per line)",
            hint=f"stage it: trainctl data push {a.lang} FOLDER (with corpus/*.txt[.gz])",
        )
    code = a.lang_code or a.lang
    kind = default_tokenizer(code) if a.tokenizer == "auto" else a.tokenizer
    with D.rank0_first(rc.ctx):
        tokenizer = (
            spacy_spec(code)
            if kind == SPACY
            else sentencepiece_tokenizer(bucket, a.lang, code, [], vocab_size=a.sp_vocab_size, log=log)
        )
        tables = tuple(corpus_tokens(bucket, a.lang, k, log=log, tokenizer=tokenizer) for k in keys)
    h = hashlib.sha256(tokenizer.id.encode())
    for table in tables:
        h.update(table.ids.tobytes())
        h.update("\n".join(table.vocab).encode())
    n_lines, n_tokens = sum(len(t) for t in tables), sum(t.n_tokens for t in tables)
    log.line(f"corpus: {n_lines:,} lines, {n_tokens:,} tokens in {len(keys)} file(s); tokenizer {tokenizer.describe()}")
    if n_tokens < store.SMALL_LM_TOKENS:
        log.line(
            f"warning: small corpus ({n_tokens:,} tokens, under {store.SMALL_LM_TOKENS:,}): "
            "expect weak transfer from this base LM"
        )
    corpus = Corpus(tokenizer, tables, h.hexdigest()[:16])
    fit.find_resume()
    fit.adopt_resume(data_hash=corpus.data_hash, labels=[])  # checkpoints record labels: none here
    return corpus


def _train(rc, fit, stage: str, tokens, valid_pct: float, vocab: list[str]) -> tuple[bytes, float | None]:
    """One direction's LM (checkpointed as `stage`) -> (its state dict as bytes, held-out perplexity)."""
    import io

    import torch

    from trainer.lm.adaptive import published_state
    from trainer.lm.train import train_lm

    learn = train_lm(rc, fit, stage, tokens, vocab=vocab, valid_pct=valid_pct)
    last = next((h for h in reversed(fit.history) if h.get("stage") == stage), {})
    perplexity = last.get("perplexity") or (math.exp(last["valid_loss"]) if "valid_loss" in last else None)
    buf = io.BytesIO()
    torch.save(published_state(D.unwrap(learn.model)), buf)
    return buf.getvalue(), None if perplexity is None else round(float(perplexity), 3)


def _vocab(fit, corpus: Corpus, a) -> list[str]:
    """The vocabulary a resumed run trained with, else one built from the corpus."""
    from trainer.text.tokens import build_vocab

    return (
        fit.resume.payload["vocab"]
        if fit.resume_point("base_lm") is not None
        else fit.carry["base_lm"]["vocab"]
        if fit.resumed_past("base_lm")
        else build_vocab(corpus.tables, min_freq=a.min_freq, max_vocab=a.max_vocab)
    )


def _lm_id(rc, fit, corpus: Corpus, budget: tuple) -> str:
    """pt-<hash> of everything that changes the weights: the same inputs give the same id, any other a new one."""
    from trainer.lm.adaptive import id_part
    from trainer.runtime.precision import cpu_autocast

    a = rc.a
    shaped_by = [
        corpus.data_hash,
        fit.arch,
        a.epochs_base_lm,
        a.seed,
        a.max_vocab,
        a.min_freq,
        a.lr_base_lm or a.lr_lm,
        a.bs,
        a.seq_len,
        a.drop_mult,
        VALID_PCT,
        a.precision,
    ]
    if a.bidirectional:  # forward-only ids stay as they were
        shaped_by.append("bidirectional")
    shaped_by += id_part(fit.lm_head)  # so do full-softmax ones
    if cpu_autocast(rc.precision):  # `auto` is bf16 only on CPUs that have it: fp32 ids stay
        shaped_by.append(["precision", "cpu-bf16"])
    if budget != (a.epochs_base_lm, 0):  # trainer.max_lm_tokens cut the training: ids without a cut stay
        shaped_by.append(["max_lm_tokens", *budget])
    return "pt-" + hashlib.sha256(json.dumps(shaped_by).encode()).hexdigest()[:12]


def _publish(rc, lm: BaseLM, corpus: Corpus, vocab: list[str], weights: bytes, weights_bwd: bytes | None) -> None:
    """Rank 0 publishes the LM and makes it CURRENT, and says where."""
    a = rc.a
    fresh = store.publish(
        rc.bucket,
        a.lang,
        lm,
        weights,
        pickle.dumps(list(vocab)),
        make_current=True,
        tokenizer_model=corpus.tokenizer.sp_model,
        weights_bwd=weights_bwd,
    )
    where = rc.bucket.url(store.prefix(a.lang, lm.id))
    rc.log.line(
        f"base LM: {'published' if fresh else 'already published'} {lm.describe()} at {where}; CURRENT now names it"
    )


def pretrain(rc, fit, corpus: Corpus) -> BaseLM:
    """Trains the LM (checkpointed as stage base_lm; then base_lm_bwd, the backward LM, with
    trainer.bidirectional), measures held-out perplexity, publishes it."""
    from trainer.lm.train import lm_budget
    from trainer.text.tokens import TokenIds, remap

    a = rc.a
    vocab = _vocab(fit, corpus, a)
    tokens = TokenIds.concat([remap(t, vocab) for t in corpus.tables])
    valid_pct = max(VALID_PCT, 1.5 / max(len(tokens), 1))
    weights, perplexity = _train(rc, fit, "base_lm", tokens, valid_pct, vocab)
    # the same held-out lines, read right to left (split_documents draws them by seed, not content)
    weights_bwd, perplexity_bwd = (
        _train(rc, fit, "base_lm_bwd", tokens.reversed(), valid_pct, vocab) if a.bidirectional else (None, None)
    )
    n_train_tokens = int(tokens.n_tokens * (1 - valid_pct))
    budget = lm_budget(tokens.n_tokens * (1 - valid_pct), a.epochs_base_lm, a.max_lm_tokens)
    read = min(n_train_tokens, budget[1]) if budget[1] else n_train_tokens  # a capped epoch reads a sample
    lm = BaseLM(
        id=_lm_id(rc, fit, corpus, budget),
        source="pretrain",
        tokenizer=corpus.tokenizer.id,
        arch=dict(fit.arch),
        vocab_size=len(vocab),
        tokens=read,
        corpus_tokens=n_train_tokens,
        corpus_hash=corpus.data_hash,
        perplexity=perplexity,
        run_id=a.run_id,
        created_at=store.now(),
        backward=bool(a.bidirectional),
        backward_perplexity=perplexity_bwd,
        head=fit.lm_head,
    )
    if rc.ctx.main:
        _publish(rc, lm, corpus, vocab, weights, weights_bwd)
    D.barrier(rc.ctx)
    return lm


def run(rc, fit, started: float) -> None:
    """The whole job on every rank; rank 0 writes metrics.json and ends the status."""
    corpus = prepare(rc, fit)
    lm = pretrain(rc, fit, corpus)
    if rc.ctx.main:
        from dataclasses import asdict

        from trainer.runfiles.metrics_file import RunMetrics

        metrics = RunMetrics.from_document(
            {
                "run_id": rc.a.run_id,
                "lang": rc.a.lang,
                "job": Job.PRETRAIN_LM.value,
                "base_lm": asdict(lm),
                "perplexity": lm.perplexity,
                "backward_perplexity": lm.backward_perplexity,
                "tokens": lm.tokens,
                "tokenizer": corpus.tokenizer.id,
                "duration_s": round(time.time() - started, 1),
                "history": fit.history,
            }
        )
        rc.put(metrics.to_json(), "metrics.json")
