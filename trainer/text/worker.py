"""The tokenizing side of the pool: one tokenizer (spaCy or SentencePiece) per process, chunk in, ids out.

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


def init(tokenizer, *, ignore_signals: bool = True) -> None:
    """Build `tokenizer` (a TokenizerSpec, or a language code for spaCy) in this process (pool initializer)."""
    from trainer.text.tokenizers import SPACY, as_spec, rules

    if ignore_signals:
        # Ctrl-C and SIGTERM reach the whole process group; the parent decides
        # what they mean and ends the workers itself.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    spec = as_spec(tokenizer)
    if _state.get("spec") == spec:
        return
    from fastai.text.core import compose

    _state.clear()
    built = {"rules": compose(*rules())}
    if spec.kind == SPACY:
        from fastai.text.core import WordTokenizer

        from trainer.text.regex_memo import large_patterns_remembered

        with large_patterns_remembered():  # spaCy's French rules: one 1.4 MB pattern
            nlp_pipe = WordTokenizer(spec.code).pipe  # fastai's blank spaCy pipeline with its special tokens
        nlp_pipe.__self__.max_length = MAX_TEXT_CHARS
        built["pipe"] = nlp_pipe
    else:
        import sentencepiece as spm

        built["sp"] = spm.SentencePieceProcessor(model_proto=spec.sp_model)
    _state.update(built, spec=spec)  # the spec last: a tokenizer that failed to build is built again next time


def _local_ids(tokens: list[list[str]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    index: dict[str, int] = {}
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int32, count=len(tokens))
    ids = np.fromiter(
        (index.setdefault(tok, len(index)) for toks in tokens for tok in toks), dtype=np.int32, count=int(lengths.sum())
    )
    return list(index), ids, lengths


def tokenize_chunk(texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Tokens of `texts` as (local vocab in order of first appearance, int32 ids, int32 lengths).

    Same tokens as fastai's `Tokenizer(tok, rules=rules())(text)`: the rules, then spaCy
    (whose ORTH hashes stand in for token strings until the end) or SentencePiece pieces.
    """
    if "sp" in _state:
        rules = _state["rules"]
        return _local_ids(_state["sp"].encode([rules(t) for t in texts], out_type=str))
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
