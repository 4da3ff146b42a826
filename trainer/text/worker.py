"""The tokenizing side of the pool: one spaCy tokenizer per process, chunk in, ids out.

A chunk comes back as (its own vocabulary, int32 ids, int32 lengths), so what
crosses the process boundary is a few arrays and each distinct token once,
not a list of strings per text.
"""
from __future__ import annotations

import signal

import numpy as np

# Blank pipelines only tokenize, so spaCy's 1M-character guard (meant for the
# parser's memory) would only reject long CSV fields; texts of any size pass.
MAX_TEXT_CHARS = 2**31 - 1

_state: dict = {}


def init(lang: str, *, ignore_signals: bool = True) -> None:
    """Build the tokenizer for `lang` in this process (pool initializer)."""
    if ignore_signals:
        # Ctrl-C and SIGTERM reach the whole process group; the parent decides
        # what they mean and ends the workers itself.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if _state.get("lang") == lang:
        return
    from fastai.text.core import WordTokenizer, compose, defaults

    nlp_pipe = WordTokenizer(lang).pipe  # fastai's blank spaCy pipeline with its special tokens
    nlp_pipe.__self__.max_length = MAX_TEXT_CHARS
    _state.update(lang=lang, pipe=nlp_pipe, rules=compose(*defaults.text_proc_rules))


def tokenize_chunk(texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Tokens of `texts` as (local vocab in order of first appearance, int32 ids, int32 lengths).

    Same tokens as `Tokenizer(WordTokenizer(lang))(text)`: fastai's rules, then
    spaCy; spaCy's ORTH hashes stand in for token strings until the end.
    """
    from spacy.attrs import ORTH

    pipe, rules = _state["pipe"], _state["rules"]
    hashes, lengths = [], np.empty(len(texts), dtype=np.int32)
    for n, doc in enumerate(pipe((rules(t) for t in texts), batch_size=256)):
        arr = doc.to_array(ORTH)
        hashes.append(arr)
        lengths[n] = len(arr)
    if not hashes or not lengths.sum():
        return [], np.zeros(0, dtype=np.int32), lengths
    flat = np.concatenate(hashes)
    uniq, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    # np.unique orders by hash; renumber by first appearance so merged vocabularies
    # list tokens in stream order (build_vocab breaks frequency ties that way, as fastai does).
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    strings = pipe.__self__.vocab.strings
    vocab = [strings[int(h)] for h in uniq[order]]
    return vocab, rank[inverse].astype(np.int32), lengths
