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
from trainer.lm.parts import VALID_MAX_TOKENS, VALID_PCT


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


FIRST_CHUNK = 1000  # texts tokenized before the tokens per text are known


def load(rc, data, splits, tokenizer):
    """(token ids, DomainTexts) of the unlabelled texts LM fine-tuning will read, or (None, None) when there
    are none. Under trainer.max_lm_tokens that is a seeded sample of the texts holding that many tokens
    (the epochs read it in parts, trainer.lm.parts): only the sample is tokenized, chunk by chunk, each
    chunk cached, so a million reviews cost the tokens that are read, not a pass of the tokenizer over all."""
    import numpy as np

    from trainer.text.cache import labelled_tokens
    from trainer.text.tokens import TokenIds

    a = rc.a
    key, texts, kept = _read(rc, data, splits)
    if key is None:
        return None, None
    # the LM's validation texts come out of the sample too (trainer.lm.parts): read them beside the budget
    budget = a.max_lm_tokens + min(VALID_MAX_TOKENS, int(a.max_lm_tokens * VALID_PCT))
    order = np.random.default_rng(a.seed).permutation(len(kept)) if budget else np.arange(len(kept))
    tables, used, done = [], 0, 0
    while done < len(kept) and (not budget or used < budget):
        if not budget:
            n = len(kept)
        elif done == 0:
            n = FIRST_CHUNK
        else:  # the texts the rest of the budget needs at the tokens per text seen so far, and a tenth more
            n = max(FIRST_CHUNK, int((budget - used) / max(used / done, 1.0) * 1.1))
        chunk = [kept[i] for i in order[done : done + n]]
        tables.append(labelled_tokens(rc.bucket, a.lang, chunk, log=rc.log, tokenizer=tokenizer))
        used += tables[-1].n_tokens
        done += len(chunk)
    tokens = TokenIds.concat(tables)
    rows = np.arange(len(tokens))
    if budget and tokens.n_tokens > budget:  # the seeded order's first texts within the budget
        rows = rows[: int(np.searchsorted(np.cumsum(tokens.lengths()), budget, side="right"))]
    info = DomainTexts(
        source=rc.bucket.url(key),
        texts=len(rows),
        tokens=int(tokens.lengths()[rows].sum()),
        dropped_held_out=len(texts) - len(kept),
        sampled_from=len(kept) if len(rows) < len(kept) else 0,
    )
    rc.log.line(
        f"unlabelled: {info.texts:,} texts, {info.tokens:,} tokens from {info.source} for LM fine-tuning"
        + (
            f" (a seeded sample of {info.sampled_from:,}: trainer.max_lm_tokens {a.max_lm_tokens:,} and "
            f"held-out texts for the LM's validation; only the sample was tokenized)"
            if info.sampled_from
            else ""
        )
        + (f"; {info.dropped_held_out:,} equal to a validation or test text dropped" if info.dropped_held_out else "")
    )
    return (tokens if len(rows) == len(tokens) else tokens.select(rows)), info
