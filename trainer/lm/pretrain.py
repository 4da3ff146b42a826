"""`python -m trainer --job pretrain-lm`: pretrain a base LM on `<lang>/data/corpus/` and publish it.

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
from types import SimpleNamespace

from trainer import distributed as D
from trainer.errors import DataError
from trainer.lm import store
from trainer.lm.store import BaseLM

JOB = "pretrain-lm"
VALID_PCT = 0.02  # of corpus lines held out for perplexity (at least one line)


def prepare(run) -> None:
    """Corpus tokens (cached) with the run's tokenizer; a SentencePiece model learns from the corpus."""
    from trainer.data import corpus_keys
    from trainer.text.cache import corpus_tokens, sentencepiece_tokenizer
    from trainer.text.languages import default_tokenizer
    from trainer.text.tokenizers import SPACY, spacy_spec

    a = run.a
    run.stage("preparing")
    run.data = SimpleNamespace(label_names=[], multi_label=False)  # checkpoints record labels: none here
    keys = corpus_keys(run.bucket, a.lang)
    if not keys:
        raise DataError(f"no corpus at {run.bucket.url(f'{a.lang}/data/corpus/')} (.txt or .txt.gz, one text "
                        "per line)", hint=f"stage it: trainctl data push {a.lang} FOLDER (with corpus/*.txt[.gz])")
    code = a.lang_code or a.lang
    kind = default_tokenizer(code) if a.tokenizer == "auto" else a.tokenizer
    with D.rank0_first(run.ctx):
        run.tokenizer = (spacy_spec(code) if kind == SPACY else
                         sentencepiece_tokenizer(run.bucket, a.lang, code, [], vocab_size=a.sp_vocab_size, log=run.log))
        run.corpus = [corpus_tokens(run.bucket, a.lang, k, log=run.log, tokenizer=run.tokenizer) for k in keys]
    h = hashlib.sha256(run.tokenizer.id.encode())
    for table in run.corpus:
        h.update(table.ids.tobytes())
        h.update("\n".join(table.vocab).encode())
    run.data_hash = h.hexdigest()[:16]
    n_lines, n_tokens = sum(len(t) for t in run.corpus), sum(t.n_tokens for t in run.corpus)
    run.log.line(f"corpus: {n_lines:,} lines, {n_tokens:,} tokens in {len(keys)} file(s); tokenizer "
                 f"{run.tokenizer.describe()}")
    if n_tokens < store.SMALL_LM_TOKENS:
        run.log.line(f"warning: small corpus ({n_tokens:,} tokens, under {store.SMALL_LM_TOKENS:,}): "
                     "expect weak transfer from this base LM")
    run.resume = run.store.latest()
    run.adopt_resume()


def _train(run, stage: str, tokens, valid_pct: float, vocab: list[str]) -> tuple[bytes, float | None]:
    """One direction's LM (checkpointed as `stage`) -> (its state dict as bytes, held-out perplexity)."""
    import io

    import torch

    learn = run.train_lm(stage, tokens, vocab=vocab, valid_pct=valid_pct)
    last = next((h for h in reversed(run.history) if h.get("stage") == stage), {})
    perplexity = last.get("perplexity") or (math.exp(last["valid_loss"]) if "valid_loss" in last else None)
    buf = io.BytesIO()
    torch.save(D.unwrap(learn.model).state_dict(), buf)
    return buf.getvalue(), None if perplexity is None else round(float(perplexity), 3)


def pretrain(run) -> BaseLM:
    """Trains the LM (checkpointed as stage base_lm; then base_lm_bwd, the backward LM, with
    trainer.bidirectional), measures held-out perplexity, publishes it."""
    from trainer.text.tokens import TokenIds, build_vocab, remap

    a = run.a
    vocab = (run.resume.payload["vocab"] if run.resume_point("base_lm") is not None
             else run.carry["base_lm"]["vocab"] if run.resumed_past("base_lm")
             else build_vocab(run.corpus, min_freq=a.min_freq, max_vocab=a.max_vocab))
    tokens = TokenIds.concat([remap(t, vocab) for t in run.corpus])
    valid_pct = max(VALID_PCT, 1.5 / max(len(tokens), 1))
    weights, perplexity = _train(run, "base_lm", tokens, valid_pct, vocab)
    # the same held-out lines, read right to left (split_documents draws them by seed, not content)
    weights_bwd, perplexity_bwd = (_train(run, "base_lm_bwd", tokens.reversed(), valid_pct, vocab)
                                   if a.bidirectional else (None, None))
    from trainer.pipeline import lm_budget

    n_train_tokens = int(tokens.n_tokens * (1 - valid_pct))
    # everything that changes the weights: the same inputs give the same id, any other a new one
    shaped_by = [run.data_hash, run.arch, a.epochs_base_lm, a.seed, a.max_vocab, a.min_freq, a.lr_lm, a.bs,
                 a.seq_len, a.drop_mult, VALID_PCT, a.precision]
    if a.bidirectional:  # forward-only ids stay as they were
        shaped_by.append("bidirectional")
    budget = lm_budget(tokens.n_tokens * (1 - valid_pct), a.epochs_base_lm, a.max_lm_tokens)
    if budget != (a.epochs_base_lm, 0):  # trainer.max_lm_tokens cut the training: ids without a cut stay
        shaped_by.append(["max_lm_tokens", *budget])
    lm_id = "pt-" + hashlib.sha256(json.dumps(shaped_by).encode()).hexdigest()[:12]
    lm = BaseLM(id=lm_id, source="pretrain", tokenizer=run.tokenizer.id, arch=dict(run.arch), vocab_size=len(vocab),
                tokens=n_train_tokens, corpus_hash=run.data_hash, perplexity=perplexity,
                run_id=a.run_id, created_at=store.now(), backward=bool(a.bidirectional),
                backward_perplexity=perplexity_bwd)
    if run.ctx.main:
        fresh = store.publish(run.bucket, a.lang, lm, weights, pickle.dumps(list(vocab)), make_current=True,
                              tokenizer_model=run.tokenizer.sp_model, weights_bwd=weights_bwd)
        where = run.bucket.url(store.prefix(a.lang, lm.id))
        run.log.line(f"base LM: {'published' if fresh else 'already published'} {lm.describe()} at {where}; "
                     "CURRENT now names it")
    D.barrier(run.ctx)
    return lm


def execute(run, started: float) -> None:
    """The whole job on every rank; rank 0 writes metrics.json and ends the status."""
    prepare(run)
    lm = pretrain(run)
    if run.ctx.main:
        from dataclasses import asdict

        metrics = {"run_id": run.a.run_id, "lang": run.a.lang, "job": JOB, "base_lm": asdict(lm),
                   "perplexity": lm.perplexity, "backward_perplexity": lm.backward_perplexity, "tokens": lm.tokens, "tokenizer": run.tokenizer.id,
                   "duration_s": round(time.time() - started, 1), "history": run.history}
        run.put(json.dumps(metrics, indent=2).encode(), "metrics.json")
