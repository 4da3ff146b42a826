"""Which rows train, tune and score a run: the data's own split when given, else a stratified one.

Sources, in order: a `split` column in train.csv (train / valid / test), or `valid.csv` /
`test.csv` next to it (trainer.data.labelled.load_labelled marks their rows); otherwise exact
duplicate texts are dropped (the first copy stays) and the rows are split stratified
by label — iterative stratification (Sechidis et al., 2011) for multi-label data — so a
rare label lands on both sides and no text is in both.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from trainer.data.labelled import LabelledData

TRAIN, VALID, TEST = "train", "valid", "test"


@dataclass
class Splits:
    """Row indices into LabelledData; `source` says where the split came from."""

    train: list[int]
    valid: list[int]
    test: list[int] = field(default_factory=list)
    source: str = "stratified"
    duplicates_dropped: int = 0
    notes: list[str] = field(default_factory=list)

    def digests(self, data_hash: str) -> dict[str, str]:
        """Each split's own digest (the tracker's dataset inputs): the data's hash, the split's name and its
        rows, so train and valid differ, and so do two splits of the same data."""
        return {
            name: hashlib.sha256(f"{data_hash}|{name}|{','.join(map(str, rows))}".encode()).hexdigest()[:16]
            for name, rows in ((TRAIN, self.train), (VALID, self.valid), (TEST, self.test))
            if rows
        }


def _stratified(rows: list[int], labels: list[list[str]], valid_pct: float, seed: int) -> tuple[list[int], list[int]]:
    """Iterative stratification into (train, valid): the rarest label is placed first, each row
    going to the side that still wants that label most (single-label data reduces to per-class)."""
    rng = random.Random(seed)
    order = rows[:]
    rng.shuffle(order)
    n_valid = max(1, int(round(len(rows) * valid_pct)))
    want = {VALID: n_valid, TRAIN: len(rows) - n_valid}
    label_want: dict[str, dict[str, float]] = {}
    for r in order:
        for lbl in labels[r]:
            w = label_want.setdefault(lbl, {VALID: 0.0, TRAIN: 0.0})
            w[VALID] += valid_pct
            w[TRAIN] += 1 - valid_pct
    side: dict[int, str] = {}
    remaining = {r for r in order if labels[r]}
    while remaining:
        counts: dict[str, int] = {}
        for r in remaining:
            for lbl in labels[r]:
                counts[lbl] = counts.get(lbl, 0) + 1
        rarest = min(counts, key=lambda lbl: (counts[lbl], lbl))
        for r in [r for r in order if r in remaining and rarest in labels[r]]:
            w = label_want[rarest]
            best = max((VALID, TRAIN), key=lambda s: (w[s], want[s], s == TRAIN))
            if want[best] <= 0:
                best = TRAIN if best == VALID else VALID
            side[r] = best
            want[best] -= 1
            for lbl in labels[r]:
                label_want[lbl][best] -= 1
            remaining.discard(r)
    for r in [r for r in order if not labels[r]]:  # rows with no label (label columns all 0) fill the rest
        best = VALID if want[VALID] > 0 and want[VALID] >= want[TRAIN] * valid_pct / (1 - valid_pct) else TRAIN
        side[r] = best
        want[best] -= 1
    return sorted(r for r in rows if side[r] == TRAIN), sorted(r for r in rows if side[r] == VALID)


def _first_copies(texts: list[str], rows) -> list[int]:
    """`rows` without exact repeats of an earlier row's text (the first copy stays), sorted."""
    first: dict[str, int] = {}
    for i in rows:
        first.setdefault(texts[i], i)
    return sorted(first.values())


def make_splits(data: LabelledData, *, valid_pct: float, seed: int) -> Splits:
    marks = data.splits
    if any(m is not None for m in marks):
        train = [i for i, m in enumerate(marks) if m in (None, TRAIN)]
        valid = [i for i, m in enumerate(marks) if m == VALID]
        test = [i for i, m in enumerate(marks) if m == TEST]
        out = Splits(train, valid, test, source="data")
        if not valid:  # only a test split given: tune on a stratified slice of the (de-duplicated) training rows
            rows = _first_copies(data.texts, train)
            out.duplicates_dropped = len(train) - len(rows)
            out.train, out.valid = _stratified(rows, data.labels, valid_pct, seed)
            out.source = "data (test) + stratified (valid)"
        seen = {data.texts[i] for i in out.train}
        leaked = sum(data.texts[i] in seen for i in out.valid + out.test)
        if leaked:
            out.notes.append(f"{leaked} validation/test row(s) repeat a training text exactly (kept as given)")
        return out
    rows = _first_copies(data.texts, range(len(data.texts)))
    train, valid = _stratified(rows, data.labels, valid_pct, seed)
    return Splits(train, valid, source="stratified", duplicates_dropped=len(data.texts) - len(rows))
