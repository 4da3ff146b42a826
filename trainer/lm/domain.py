"""Unlabelled in-domain texts (`<lang>/data/unlabelled.*`) for LM fine-tuning, beside the training rows.

Users usually hold far more unlabelled texts of their domain (tickets, tweets) than labelled
rows; ULMFiT's second stage learns the domain's language from them. They are tokenized once
(cached like the labelled texts) and never include a validation or test text: a text equal to
a held-out row's text, or to one of its lines, is dropped, so the rows that are scored stay
unseen until they are scored.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from trainer.data.labelled import unlabelled_key, unlabelled_texts


@dataclass
class DomainTexts:
    """What LM fine-tuning read besides the training rows (recorded in metrics.json as `unlabelled`)."""

    source: str
    texts: int
    tokens: int
    dropped_held_out: int  # equal to a validation or test text
    sampled_from: int = 0  # texts before the trainer.max_lm_tokens sample (0: all kept)

    def record(self) -> dict:
        return asdict(self)


def _read(rc, data, splits) -> tuple[str | None, list[str], list[str]]:
    """(bucket key, every unlabelled text, those equal to no validation or test text)."""
    a, bucket = rc.a, rc.bucket
    key = unlabelled_key(bucket, a.lang)
    if key is None:
        return None, [], []
    texts = unlabelled_texts(bucket.read_bytes(key), key, text_col=a.text_col, source=bucket.url(key))
    held_out = set()
    for i in [*splits.valid, *splits.test]:  # a multi-line text may come back as lines of a .txt
        text = data.texts[i]
        held_out.update([text.strip(), *(line.strip() for line in re.split(r"[\r\n]+", text))])
    held_out.discard("")
    return key, texts, [t for t in texts if t not in held_out]


def for_tokenizer(rc, data, splits, max_chars: int) -> list[str]:
    """The unlabelled texts a SentencePiece model learns from beside the training rows: the first
    `max_chars` characters' worth, never a held-out text (they are the domain's own words)."""
    _, _, kept = _read(rc, data, splits)
    out, used = [], 0
    for text in kept:
        if used + len(text) > max_chars:
            break
        out.append(text)
        used += len(text)
    return out


def load(rc, data, splits, tokenizer):
    """(token ids, DomainTexts) of the language's unlabelled texts, or (None, None) when it has none."""
    from trainer.text.cache import labelled_tokens

    a = rc.a
    key, texts, kept = _read(rc, data, splits)
    if key is None:
        return None, None
    tokens = labelled_tokens(rc.bucket, a.lang, kept, log=rc.log, tokenizer=tokenizer)
    rows = within_budget(tokens.lengths(), a.max_lm_tokens // max(1, a.epochs_lm), a.seed)
    info = DomainTexts(source=rc.bucket.url(key), texts=len(rows), tokens=int(tokens.lengths()[rows].sum()),
                       dropped_held_out=len(texts) - len(kept), sampled_from=len(kept) if len(rows) < len(kept) else 0)
    rc.log.line(f"unlabelled: {info.texts:,} texts, {info.tokens:,} tokens from {info.source} for LM fine-tuning"
                 + (f" (a seeded sample of {info.sampled_from:,}: trainer.max_lm_tokens {a.max_lm_tokens:,} over "
                    f"{a.epochs_lm} epoch(s))" if info.sampled_from else "")
                 + (f"; {info.dropped_held_out:,} equal to a validation or test text dropped"
                    if info.dropped_held_out else ""))
    return (tokens if not info.sampled_from else tokens.select(rows)), info


def within_budget(lengths, budget: int, seed: int):
    """Rows (in their order) of a seeded sample of texts whose tokens fit `budget` (0: every row)."""
    import numpy as np

    if not budget or int(lengths.sum()) <= budget:
        return np.arange(len(lengths))
    picked, used = [], 0
    for row in np.random.default_rng(seed).permutation(len(lengths)):  # a text too long is skipped, not the end
        if used + lengths[row] <= budget:
            picked.append(row)
            used += int(lengths[row])
    return np.sort(np.array(picked, dtype=np.int64))
