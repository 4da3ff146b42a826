"""fastai DataLoaders over cached token ids: nothing is tokenized per epoch, lengths are known up front.

Items are row numbers; `CachedText` turns one into its ids. With world > 1
each rank trains on its own shard and every rank gets the same number of
training batches (a rank with one batch more would wait forever in DDP's
all-reduce); the validation set is whole on every rank. Every rank computes
every shard's size itself, so no communication is needed.

`raw_text_dataloaders` is the standard raw-string pipeline, for export:
a learner exported with it predicts from plain strings.
"""

from __future__ import annotations

import math
import random
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from fastai.text.all import (
    Categorize,
    ColReader,
    DataLoaders,
    Datasets,
    L,
    MultiCategorize,
    Numericalize,
    OneHotEncode,
    Pad_Chunk,
    SortedDL,
    TensorText,
    Tokenizer,
    Transform,
    default_device,
)
from fastai.text.data import reverse_text

from trainer.text.batches import FedLMDataLoader, FedSortedDL
from trainer.text.tokenizers import as_spec, rules
from trainer.text.tokens import TokenIds


class CachedText(Transform):
    """Row number -> its cached ids as a TensorText (decodes back to tokens); `vocab` is the token vocab."""

    def __init__(self, tokens: TokenIds):
        super().__init__()
        self.tokens, self.vocab = tokens, tokens.vocab

    def encodes(self, row) -> TensorText:
        return TensorText(torch.from_numpy(self.tokens.text(int(row)).astype(np.int64)))

    def decodes(self, o: TensorText):
        return L(self.vocab[i] for i in o.tolist())


class RowLabels(Transform):
    """Row number -> its label (single-label) or list of labels (multi-label), for Categorize."""

    def __init__(self, targets, multi_label: bool):
        super().__init__()
        self.targets = [list(t) for t in targets] if multi_label else [t[0] for t in targets]

    def encodes(self, row):
        return self.targets[int(row)]


class RankLMDataLoader(FedLMDataLoader):
    """An LMDataLoader whose batch length is capped at `max_bl`, so that all ranks run the same batches."""

    def __init__(self, dataset, lens=None, max_bl: int | None = None, **kwargs):
        super().__init__(dataset, lens=lens, **kwargs)
        self.max_bl = max_bl
        if max_bl is not None and self.bl > max_bl:
            # fastai's formulas (LMDataLoader.__init__) with the shorter batch length
            self.bl = max_bl
            self.n_batches = self.bl // self.seq_len + int(self.bl % self.seq_len != 0)
            self.last_len = self.bl - (self.n_batches - 1) * self.seq_len
            self.n = self.n_batches * self.bs

    def new(self, dataset=None, **kwargs):
        kwargs.setdefault("max_bl", self.max_bl if dataset is None else None)
        return super().new(dataset=dataset, **kwargs)

    def shuffle_fn(self, idxs):
        # fastai shuffles the previous epoch's document order in place, so an epoch's order hangs
        # on every epoch before it; from the stored order it hangs only on the RNG state at the
        # epoch's start, which checkpoints hold: a resumed epoch reads the documents in the same order.
        self.items.idxs = self.lens.idxs = L.range(len(self.items))
        return super().shuffle_fn(idxs)


def label_tfms(label_names: list[str], multi_label: bool) -> list:
    """The y transforms after the row -> label(s) step: indices, or one-hot vectors for multi-label."""
    if multi_label:
        return [MultiCategorize(vocab=label_names), OneHotEncode(len(label_names))]
    return [Categorize(vocab=label_names)]


def split_documents(n: int, valid_pct: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, valid) document numbers, shuffled by `seed`: the same on every rank."""
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    n_valid = max(1, int(n * valid_pct))
    return idx[n_valid:], idx[:n_valid]


def shard_rows(rows: list[int], rank: int, world: int) -> list[int]:
    """Rank's share of `rows`, padded by repeating rows so that every rank has ceil(len/world)."""
    if world == 1:
        return list(rows)
    if not rows:
        raise ValueError("no training rows to shard")
    per_rank = math.ceil(len(rows) / world)
    padded = [rows[i % len(rows)] for i in range(per_rank * world)]
    return padded[rank::world]


def _check_rank(rank: int, world: int) -> None:
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in a world of {world}")


def lm_dataloaders(
    tokens: TokenIds,
    *,
    bs: int,
    seq_len: int,
    seed: int,
    valid_pct: float = 0.1,
    rank: int = 0,
    world: int = 1,
    max_train_tokens: int = 0,
) -> DataLoaders:
    """Language-model DataLoaders over `tokens` (ids already into the LM vocab, `tokens.vocab`).

    `max_train_tokens`: train on the first training documents (in the seeded order) that hold that
    many tokens, the same every epoch; the held-out documents are the same either way."""
    _check_rank(rank, world)
    train, valid = split_documents(len(tokens), valid_pct, seed)
    lengths = tokens.lengths()
    if max_train_tokens:
        keep = int(np.searchsorted(np.cumsum(lengths[train]), max_train_tokens)) + 1
        train = train[:keep]
    shards = [train[r::world] for r in range(world)]
    # LMDataLoader's batch length: round_multiple(sum(lens) - 1, bs, round_down=True) // bs
    batch_lengths = [(int(lengths[s].sum()) - 1) // bs for s in shards]
    if min(batch_lengths) < 1:
        raise ValueError(
            f"too few tokens for a language-model batch: {min(batch_lengths) * bs + 1} tokens "
            f"on a rank with bs={bs}; add text or lower bs"
        )
    dsets = Datasets(list(range(len(tokens))), [[CachedText(tokens)]], splits=[shards[rank], valid])
    device = default_device()
    train_dl = RankLMDataLoader(
        dsets.subset(0),
        lens=lengths[shards[rank]].tolist(),
        tokens=tokens,
        rows=shards[rank],
        max_bl=min(batch_lengths) if world > 1 else None,
        bs=bs,
        seq_len=seq_len,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        device=device,
    )
    valid_dl = FedLMDataLoader(
        dsets.subset(1),
        lens=lengths[valid].tolist(),
        tokens=tokens,
        rows=valid,
        bs=bs,
        seq_len=seq_len,
        shuffle=False,
        drop_last=False,
        num_workers=0,
        device=device,
    )
    return DataLoaders(train_dl, valid_dl, device=device)


def lm_part_dataloaders(
    tokens: TokenIds, parts: list, valid: list[int], *, bs: int, seq_len: int, rank: int = 0, world: int = 1
) -> tuple[DataLoaders, list]:
    """LM DataLoaders whose training documents change by epoch (trainer.lm.parts): (DataLoaders over the first
    part, one training DataLoader per part). Every part's loader runs the same number of batches on every
    rank (the shortest's), so the one-cycle schedule and a resume's batch position hold for all of them."""
    _check_rank(rank, world)
    lengths = tokens.lengths()
    shards = [[list(map(int, part))[r::world] for r in range(world)] for part in parts]
    batch_lengths = [(int(lengths[s].sum()) - 1) // bs for part in shards for s in part]
    if min(batch_lengths) < 1:
        raise ValueError(
            f"too few tokens for a language-model batch: {min(batch_lengths) * bs + 1} tokens "
            f"in a part with bs={bs}; add text or lower bs"
        )
    device = default_device()
    valid = list(map(int, valid))
    loaders = []
    for part in shards:
        dsets = Datasets(list(range(len(tokens))), [[CachedText(tokens)]], splits=[part[rank], valid])
        loaders.append(
            RankLMDataLoader(
                dsets.subset(0),
                lens=lengths[part[rank]].tolist(),
                tokens=tokens,
                rows=part[rank],
                max_bl=min(batch_lengths),
                bs=bs,
                seq_len=seq_len,
                shuffle=True,
                drop_last=True,
                num_workers=0,
                device=device,
            )
        )
    valid_dl = FedLMDataLoader(
        dsets.subset(1),
        lens=lengths[valid].tolist(),
        tokens=tokens,
        rows=valid,
        bs=bs,
        seq_len=seq_len,
        shuffle=False,
        drop_last=False,
        num_workers=0,
        device=device,
    )
    return DataLoaders(loaders[0], valid_dl, device=device), loaders


def classifier_dataloaders(
    tokens: TokenIds,
    targets,
    *,
    multi_label: bool,
    label_names: list[str],
    splits: tuple[list[int], list[int]],
    bs: int,
    seq_len: int,
    rank: int = 0,
    world: int = 1,
) -> DataLoaders:
    """Classifier DataLoaders: x = cached ids (ids into the classifier vocab), y = labels of `targets` rows."""
    _check_rank(rank, world)
    train = shard_rows(list(splits[0]), rank, world)
    valid = list(splits[1])
    y_tfms = [RowLabels(targets, multi_label), *label_tfms(label_names, multi_label)]
    dsets = Datasets(list(range(len(tokens))), [[CachedText(tokens)], y_tfms], splits=[train, valid])
    lengths = tokens.lengths()
    pad, device = Pad_Chunk(seq_len=seq_len), default_device()
    # res = the lengths SortedDL sorts by (it would otherwise fetch every item once to measure it)
    train_dl = FedSortedDL(
        dsets.subset(0),
        res=lengths[train].tolist(),
        tokens=tokens,
        rows=train,
        bs=bs,
        shuffle=True,
        drop_last=True,
        before_batch=pad,
        num_workers=0,
        device=device,
    )
    valid_dl = FedSortedDL(
        dsets.subset(1),
        res=lengths[valid].tolist(),
        tokens=tokens,
        rows=valid,
        bs=bs,
        shuffle=False,
        drop_last=False,
        before_batch=pad,
        num_workers=0,
        device=device,
    )
    return DataLoaders(train_dl, valid_dl, device=device)


def _pad_seq_len(dls, default: int = 72) -> int:
    for tfm in getattr(dls.train.before_batch, "fs", []):
        if isinstance(tfm, Pad_Chunk):
            return tfm.seq_len
    return default


def raw_text_dataloaders(
    dls,
    tokenizer,
    vocab: list[str],
    label_names,
    multi_label: bool,
    scratch: Path | None = None,
    backwards: bool = False,
) -> DataLoaders:
    """DataLoaders with the raw-string pipeline (text -> tokens -> ids in `vocab`, reversed for a
    backward model, as fastai's own `TextBlock(backwards=True)` does) and the same labels.

    Over a one-row-per-label DataFrame: set it as `learn.dls` right before
    `learn.export(...)`, so `load_learner(...).predict("some text")` works and
    the export carries no training data.
    """
    label_names = list(label_names)
    df = pd.DataFrame({"text": label_names, "labels": [[name] for name in label_names] if multi_label else label_names})
    spec = as_spec(tokenizer)  # a TokenizerSpec, or a language code for spaCy
    # SentencePiece's model file is written to `scratch` (the run's work folder), never the cwd;
    # the export carries the model itself.
    tok = spec.fastai_tokenizer(Path(scratch or tempfile.mkdtemp(prefix="trainstack-tok-")) / "tokenizer")
    x_tfms = [
        ColReader("text"),
        Tokenizer(tok, rules=rules()),
        Numericalize(vocab=list(vocab)),
        *([reverse_text] if backwards else []),
    ]
    y_tfms = [ColReader("labels"), *label_tfms(label_names, multi_label)]
    rows = list(range(len(df)))
    dsets = Datasets(df, [x_tfms, y_tfms], splits=[rows, rows], dl_type=SortedDL)
    return dsets.dataloaders(
        bs=dls.bs, before_batch=Pad_Chunk(seq_len=_pad_seq_len(dls)), num_workers=0, path=dls.path, device=dls.device
    )
