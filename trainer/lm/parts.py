"""LM fine-tuning that reads the user's text: its epochs walk through the unlabelled texts in parts.

trainer.max_lm_tokens buys tokens read, all epochs together. It used to buy a sample of
max_lm_tokens / epochs_lm tokens read epochs_lm times: on IMDb, six passes over 3 % of the
reviews, the validation perplexity flat from the fifth (docs/DECISIONS.md "LM fine-tuning reads
the user's text"). Now the epochs keep their number and their recipe (the first with only the
embeddings and the head trainable) and each reads the next part of the seeded sample
(trainer.lm.domain): as many different texts as the budget buys, once. Unlabelled texts that
fit in one epoch's share are read whole by every epoch, as before; texts between one share and
the whole budget are read in parts that wrap around (about budget / texts passes). The labelled
training rows are in every part. The LM's validation texts are a seeded tenth of the unlabelled
texts (at most VALID_MAX_TOKENS tokens), in no part: its perplexity is on reviews it never read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VALID_PCT = 0.1
VALID_MAX_TOKENS = 250_000


@dataclass(frozen=True)
class PartPlan:
    """Documents (indices into the fine-tuning table) each epoch trains on, and the validation documents."""

    parts: list[np.ndarray]  # one per epoch
    valid: np.ndarray
    passes: float  # how many times the unlabelled training texts are read, all epochs together

    def describe(self, tokens_per_part: list[int]) -> str:
        return (
            f"{len(self.parts)} epoch(s) of {min(tokens_per_part):,}-{max(tokens_per_part):,} tokens, each "
            f"reading the next part of the unlabelled texts ({self.passes:.2f} pass(es) over them); "
            f"{len(self.valid):,} held-out texts for its validation"
        )


def plan(lengths: np.ndarray, n_always: int, epochs: int, budget: int, seed: int) -> PartPlan | None:
    """Parts for `epochs` epochs over documents whose token `lengths` are given: the first `n_always` (the
    training rows) in every part, the others (unlabelled texts, already in a seeded order) walked in
    order, each epoch taking the next budget / epochs tokens' worth. None: every epoch reads every
    document (no budget, or the unlabelled texts fit in one epoch's share)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    walked = np.arange(n_always, len(lengths))
    if not budget or epochs < 1 or len(walked) < 2:
        return None
    share = budget / epochs
    rng = np.random.default_rng(seed)
    n_valid = max(1, int(len(walked) * VALID_PCT))
    valid = walked[np.sort(rng.permutation(len(walked))[:n_valid])]
    valid = valid[np.cumsum(lengths[valid]) <= max(VALID_MAX_TOKENS, int(lengths[valid[0]]))]
    train = np.setdiff1d(walked, valid)
    total = int(lengths[train].sum())
    if total <= share or len(train) == 0:
        return None
    always = np.arange(n_always)
    parts, at = [], 0
    for _ in range(epochs):
        taken, used = [], 0
        while used < share and len(taken) < len(train):
            doc = train[at % len(train)]
            taken.append(doc)
            used += int(lengths[doc])
            at += 1
        parts.append(np.concatenate([always, np.array(taken, dtype=np.int64)]))
    passes = sum(int(lengths[p[n_always:]].sum()) for p in parts) / total
    return PartPlan(parts, valid, round(passes, 2))
