"""fastai's text DataLoaders at the speed of the step: batches made from the token ids in one array, fed to a GPU
without making the host wait.

fastai builds each batch row by row (an item a row, then a collation), which on a GPU machine's CPU took longer
than the step itself (docs/BENCHMARKS.md "Loop"); these loaders make the same batches, element for element and in
the same order, from TokenIds directly. trainer.text.loaders builds them.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from fastai.text.all import LMDataLoader, LMTensorText, Pad_Chunk, SortedDL, TensorText
from fastai.torch_core import to_device
from fastcore.basics import chunked

from trainer.text.tokens import TokenIds

CHUNK_ROWS = "chunk_rows"  # the batch's metadata trainer.runtime.loop.HostRowsEncoder reads
GROUP = 16  # classifier batches padded together, at most
GROUP_IDS = 4_000_000  # and at most this many ids a group, padding included (32 MB, and about as much again to fill it)


def _pinned(b):
    if isinstance(b, torch.Tensor):
        return b.pin_memory()
    return type(b)(_pinned(o) for o in b) if isinstance(b, (tuple, list)) else b


class DeviceFeed:
    """A fastai DataLoader that, on CUDA, copies each batch from pinned memory without waiting (non_blocking) and
    collates the next batch while the device runs the current one: a plain copy of pageable memory makes the host
    wait for the device before every batch; on a CPU, where the batches are made, fastai's copy (a no-op through its
    dispatch) is skipped. Made in this process (no workers), the batches come from fastai's own calls without
    torch's iterator around them. The same batches in the same order."""

    def __iter__(self):
        device = self.device
        if device is None:
            yield from self._made()
            return
        kind = torch.device(device).type
        if kind not in ("cpu", "cuda"):
            yield from super().__iter__()
            return
        self.device = None  # fastai's copy is skipped: a no-op on a CPU, a blocking one on CUDA (ours follows)
        try:
            if kind == "cpu":
                yield from self._made()
                return
            ahead = None
            for b in self._made():
                b = to_device(_pinned(b), device, non_blocking=True)
                if ahead is not None:
                    yield ahead
                ahead = b
            if ahead is not None:
                yield ahead
        finally:
            self.device = device

    def _made(self):
        """fastai's DataLoader.__iter__ (its device copy left to the caller): with no worker processes and no
        pinning by torch, its calls in its order without torch's single-process iterator, which only hands on
        what `create_batches` yields (fastai's collate there is the identity) at about 0.1 ms a batch (a profiler
        scope, a fetcher, a sampler)."""
        if self.fake_l.num_workers != 0 or self.pin_memory or self.fake_l.timeout:
            yield from super().__iter__()  # self.device is None here: no copy
            return
        self.randomize()
        self.before_iter()
        self._DataLoader__idxs = self.get_idxs()  # fastai's private order, which its sample() reads
        # torch's iterator draws its workers' base seed from torch's RNG as it starts: drawn here too, so every
        # dropout mask after it is the one fastai's loop would draw
        torch.empty((), dtype=torch.int64).random_(generator=self.fake_l.generator)
        for b in self.create_batches(self.sample()):
            yield self.after_batch(b)
        self.after_iter()
        if hasattr(self, "it"):
            del self.it


class FedLMDataLoader(DeviceFeed, LMDataLoader):
    """fastai's LMDataLoader, fed as DeviceFeed says, whose batches are slices of the epoch's token stream.

    fastai builds each of a batch's `bs` rows as an item (a slice of its lazily concatenated documents, then a
    collation): 10 ms a batch at bs 64 on a GPU machine's CPU, 42 ms at bs 256, longer than the step. With the
    documents' ids at hand (`tokens`, `rows`: the dataset's position i is text rows[i]), the epoch's documents are
    concatenated once, in the order fastai shuffled them, and every batch is a slice of that array: the same
    batches, as fastai's formulas place them (LMDataLoader.create_item)."""

    def __init__(self, dataset, lens=None, tokens: TokenIds | None = None, rows=None, **kwargs):
        self.tokens, self.rows = tokens, None if rows is None else np.asarray(rows, dtype=np.int64)
        super().__init__(dataset, lens=lens, **kwargs)

    def new(self, dataset=None, **kwargs):
        if dataset is None:
            kwargs.setdefault("tokens", self.tokens)
            kwargs.setdefault("rows", self.rows)
        return super().new(dataset=dataset, **kwargs)

    def _stream(self) -> np.ndarray:
        """(bs, bl + 1) ids: row r is the epoch's token stream from r * bl, one more token for the last target."""
        order = self.rows[np.asarray(self.items.idxs, dtype=np.int64)]
        ids = self.tokens.select(order).ids[: self.bs * self.bl + 1]
        rows = np.lib.stride_tricks.as_strided(ids, (self.bs, self.bl + 1), (self.bl * ids.itemsize, ids.itemsize))
        return rows

    def create_batches(self, samps):
        if self.tokens is None:
            yield from super().create_batches(samps)
            return
        stream = None
        for chunk in chunked(samps, self.bs, self.drop_last):
            b = chunk[0] // self.bs if chunk and chunk[0] is not None else -1
            if len(chunk) != self.bs or list(chunk) != list(range(b * self.bs, (b + 1) * self.bs)):
                yield self.do_batch([self.do_item(s) for s in chunk])  # not a whole batch in order: fastai's way
                continue
            if stream is None:
                stream = self._stream()
            sl = self.last_len if b == self.n_batches - 1 else self.seq_len
            window = stream[:, b * self.seq_len : b * self.seq_len + sl + 1].astype(np.int64)
            x, y = torch.from_numpy(window[:, :-1].copy()), torch.from_numpy(window[:, 1:].copy())
            yield x.as_subclass(LMTensorText), y.as_subclass(TensorText)  # what the types' constructors make


class FedSortedDL(DeviceFeed, SortedDL):
    """fastai's SortedDL, fed as DeviceFeed says, whose batches are padded from the ids in one array.

    fastai makes each text an item, pads each one (Pad_Chunk: whole chunks of padding first, the remainder
    after the text) and collates them: 15 ms a batch at bs 64 on a GPU machine's CPU, 66 ms at bs 256. With the
    ids at hand (`tokens`, `rows`: the dataset's position i is text rows[i]), a batch is one array filled with
    padding and the texts copied in where Pad_Chunk puts them; the targets are encoded once. The same batches,
    in fastai's order (SortedDL.get_idxs)."""

    def __init__(self, dataset, tokens: TokenIds | None = None, rows=None, **kwargs):
        self.tokens, self.rows = tokens, None if rows is None else np.asarray(rows, dtype=np.int64)
        self._targets = self._spans = None
        super().__init__(dataset, **kwargs)

    def new(self, dataset=None, **kwargs):
        if dataset is None:
            kwargs.setdefault("tokens", self.tokens)
            kwargs.setdefault("rows", self.rows)
        return super().new(dataset=dataset, **kwargs)

    def _pad(self) -> Pad_Chunk | None:
        """The batch's one transform, where it is a first-padding Pad_Chunk (else fastai's own way)."""
        fs = list(getattr(self.before_batch, "fs", []))
        return fs[0] if len(fs) == 1 and isinstance(fs[0], Pad_Chunk) and fs[0].pad_first else None

    def _encoded(self) -> tuple:
        """(targets as a numpy array, their fastai type), and each dataset position's (start, length) in the ids."""
        if self._targets is None:
            targets = torch.stack([self.dataset[i][1] for i in range(len(self.dataset))])
            # indexed as a numpy array, then given its fastai type back: fastai's dispatch costs more than the index
            self._targets = (targets.as_subclass(torch.Tensor).numpy(), type(targets))
            offsets = self.tokens.offsets
            self._spans = (offsets[self.rows], offsets[self.rows + 1] - offsets[self.rows])
        return self._targets, self._spans

    def _group(self, chunks: list[list[int]], pad: Pad_Chunk):
        """The batches of `chunks` (each a batch's dataset positions), padded together into one buffer: a dozen numpy
        calls for the group rather than for every batch (each call's own cost is most of a small batch's)."""
        (plain, kind), (all_starts, all_lens) = self._encoded()
        sizes = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
        positions = np.fromiter(itertools.chain.from_iterable(chunks), dtype=np.int64, count=int(sizes.sum()))
        starts, lens = all_starts[positions], all_lens[positions]
        first = np.cumsum(sizes) - sizes  # each batch's first row
        widths = np.maximum.reduceat(lens, first)
        row_width = np.repeat(widths, sizes)
        row_at = np.cumsum(row_width) - row_width  # where each row starts in the buffer
        buffer = np.full(int(row_width.sum()), pad.pad_idx, dtype=np.int64)
        # every text's ids in one copy, each row's from where Pad_Chunk starts it (whole chunks of padding before)
        ends = np.cumsum(lens)
        within = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - lens, lens)
        at = np.repeat(row_at + (row_width - lens) // pad.seq_len * pad.seq_len, lens) + within
        buffer[at] = self.tokens.ids[np.repeat(starts, lens) + within]
        targets = plain[positions]
        counted = not list(self.after_batch.fs)  # nothing changes the batch between here and the model
        for size, width, row, cell in zip(sizes.tolist(), widths.tolist(), first.tolist(), row_at[first].tolist()):
            x = buffer[cell : cell + size * width].reshape(size, width)
            batch = torch.from_numpy(x).as_subclass(TensorText)  # what TensorText(…) makes, without fastai's cast
            if counted:
                # the rows fastai's SentenceEncoder runs at each chunk (those not padding at its first position),
                # counted here: on the device each count is a sync (trainer.runtime.loop.HostRowsEncoder reads these)
                setattr(batch, CHUNK_ROWS, tuple((x[:, :: pad.seq_len] != pad.pad_idx).sum(axis=0).tolist()))
            yield batch, torch.from_numpy(targets[row : row + size]).as_subclass(kind)

    def create_batches(self, samps):
        pad = self._pad() if self.tokens is not None else None
        if pad is None:
            yield from super().create_batches(samps)
            return
        longest = int(self._encoded()[1][1].max(initial=0))
        group = max(1, min(GROUP, GROUP_IDS // max(1, self.bs * longest)))  # batches a group, by the longest text
        for chunks in chunked(chunked(samps, self.bs, self.drop_last), group):
            yield from self._group(chunks, pad)
