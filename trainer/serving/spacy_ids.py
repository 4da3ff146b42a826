"""Model ids of texts through fastai's spaCy tokenizer, each distinct piece of text tokenized once.

spaCy tokenizes a text piece by piece: it splits it at whitespace and tokenizes each run of non-space
(and each run of whitespace that is more than the one space separating two words) on its own, with its
prefix, suffix and infix rules and the special cases, then matches the special cases over the tokens.
It caches each piece's tokens, but not once a special case was met in the text (spaCy #1250): fastai's
texts begin with xxbos, a special case, so it never caches and re-tokenizes every word of every text.

The pieces cut the same way are tokenized here through spaCy's own tokenizer, one at a time, and their
ids kept: a piece's tokens do not depend on its neighbours (fastai's special tokens are single words,
so no special case spans two pieces), and tests/e2e/test_padded_batches.py compares with fastai's ids.
"""

from __future__ import annotations

import re

import numpy as np

MAX_PIECES = 500_000  # distinct pieces remembered (then forgotten at once): memory stays bounded
_RUNS = re.compile(r"\s+|\S+")  # \s is str.isspace in a str pattern, as spaCy tests whitespace


def pieces(text: str) -> list[str]:
    """`text` cut as spaCy's Tokenizer._tokenize_affixes cuts it: runs of whitespace and of non-space, the
    first whole, each later one less its first character when that is ' ' (the space after a word only
    separates), those left empty dropped."""
    runs = _RUNS.findall(text)
    return runs[:1] + [run[1:] if run[0] == " " else run for run in runs[1:] if run != " "]


class SpacyIds:
    """`ids(texts)`: each (rule-processed) text's model ids; unknown tokens 0 (xxunk), as Numericalize."""

    def __init__(self, spacy_tokenizer, vocab_ids: dict):
        """`spacy_tokenizer`: fastai's SpacyTokenizer (its blank pipeline with the special cases)."""
        self._tokenize = spacy_tokenizer.pipe.__self__.tokenizer
        strings = self._tokenize.vocab.strings
        hashes = np.array([strings[token] for token in vocab_ids], dtype=np.uint64)
        order = np.argsort(hashes)
        self._hashes = hashes[order]
        self._ids = np.array(list(vocab_ids.values()), dtype=np.int64)[order]
        self._pieces: dict[str, list[int]] = {}

    def _piece_ids(self, piece: str) -> list[int]:
        from spacy.attrs import ORTH

        orth = self._tokenize(piece).to_array(ORTH).astype(np.uint64)
        at = np.minimum(np.searchsorted(self._hashes, orth), len(self._hashes) - 1)
        return np.where(self._hashes[at] == orth, self._ids[at], 0).tolist()

    def ids(self, texts: list[str]) -> list[np.ndarray]:
        known = self._pieces
        rows = []
        for text in texts:
            row: list[int] = []
            for piece in pieces(text):
                piece_ids = known.get(piece)
                if piece_ids is None:
                    if len(known) >= MAX_PIECES:
                        known.clear()
                    piece_ids = known[piece] = self._piece_ids(piece)
                row.extend(piece_ids)
            rows.append(np.array(row, dtype=np.int64))
        return rows
