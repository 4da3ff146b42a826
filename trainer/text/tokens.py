"""Token ids as compact int32 tables, parallel tokenization, vocabularies and remapping.

`tokenize` streams texts through a pool of tokenizer processes (all usable
cores by default) in bounded chunks, so a generator over a many-GB corpus is
never held in memory as strings: only the int32 ids are kept.
"""

from __future__ import annotations

import io
import itertools
import json
import multiprocessing.context
import os
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from trainer.text import worker
from trainer.text.tokenizers import SPACY, TokenizerSpec, as_spec

# A chunk also ends at this many characters, so a run of very long texts stays small in flight.
CHUNK_CHARS = 4_000_000
# Workers are replaced after this many chunks: spaCy's string store only grows.
CHUNKS_PER_WORKER = 200


@dataclass(eq=False)
class TokenIds:
    """Token ids of many texts: text i is `ids[offsets[i]:offsets[i+1]]`, ids index `vocab`."""

    vocab: list[str]
    ids: np.ndarray  # int32, all texts concatenated
    offsets: np.ndarray  # int64, len(texts) + 1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, TokenIds)
            and self.vocab == other.vocab
            and np.array_equal(self.ids, other.ids)
            and np.array_equal(self.offsets, other.offsets)
        )

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def text(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def counts(self) -> np.ndarray:
        return np.bincount(self.ids, minlength=len(self.vocab))

    def select(self, rows) -> TokenIds:
        """These texts, in this order (repeats allowed); the vocab is shared, unused entries included."""
        rows = np.asarray(rows, dtype=np.int64)
        lens = self.lengths()[rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        # position j of the result reads ids[start of its text + j - start of its text in the result]
        gather = np.repeat(self.offsets[rows] - offsets[:-1], lens) + np.arange(offsets[-1])
        return TokenIds(self.vocab, self.ids[gather], offsets)

    def reversed(self) -> TokenIds:
        """Every text's tokens in reverse order (texts keep their order): a backward model's input."""
        lens = self.lengths()
        # position j of text [s, e) reads ids[s + e - 1 - j]
        gather = np.repeat(self.offsets[:-1] + self.offsets[1:] - 1, lens) - np.arange(self.n_tokens)
        return TokenIds(self.vocab, self.ids[gather], self.offsets.copy())

    @classmethod
    def concat(cls, tables: list[TokenIds]) -> TokenIds:
        """The texts of all tables in order, over one merged vocab (first table's ids unchanged)."""
        if not tables:
            return empty()
        vocab = list(tables[0].vocab)
        index = {tok: i for i, tok in enumerate(vocab)}
        ids, offsets, base = [], [np.zeros(1, dtype=np.int64)], 0
        for t in tables:
            if t.vocab is tables[0].vocab or t.vocab == tables[0].vocab:
                ids.append(t.ids)
            else:
                lookup = np.fromiter(
                    (index.setdefault(tok, len(index)) for tok in t.vocab), dtype=np.int32, count=len(t.vocab)
                )
                ids.append(lookup[t.ids])
            offsets.append(t.offsets[1:] + base)
            base += t.n_tokens
        vocab.extend(list(index)[len(vocab) :])
        return cls(vocab, np.concatenate(ids).astype(np.int32, copy=False), np.concatenate(offsets))

    def to_bytes(self) -> bytes:
        """An .npz of ids, offsets and the vocab as UTF-8 JSON bytes (loadable without pickle).

        Not compressed: deflate takes ~0.3 s per million ids in the parent, where
        the workers wait; int32 is 4 bytes a token (the JSON cache took ~10).
        """
        buf = io.BytesIO()
        vocab = np.frombuffer(json.dumps(self.vocab, ensure_ascii=False).encode(), dtype=np.uint8)
        np.savez(
            buf,
            ids=self.ids.astype(np.int32, copy=False),
            offsets=self.offsets.astype(np.int64, copy=False),
            vocab=vocab,
        )
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> TokenIds:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return cls(json.loads(npz["vocab"].tobytes().decode()), npz["ids"], npz["offsets"])


def empty() -> TokenIds:
    return TokenIds([], np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64))


def default_workers() -> int:
    """The cores this process may run on (a container's cpuset, not the host's count)."""
    return len(os.sched_getaffinity(0))


def _chunks(texts: Iterable[str], rows: int) -> Iterator[list[str]]:
    chunk, chars = [], 0
    for text in texts:
        chunk.append(text)
        chars += len(text)
        if len(chunk) >= rows or chars >= CHUNK_CHARS:
            yield chunk
            chunk, chars = [], 0
    if chunk:
        yield chunk


class _Merger:
    """Appends chunk results, renumbering each chunk's local ids into one growing vocab."""

    def __init__(self):
        self.index: dict[str, int] = {}
        self.ids: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []

    def add(self, result: tuple[list[str], np.ndarray, np.ndarray]) -> None:
        local_vocab, ids, lengths = result
        index = self.index
        lookup = np.fromiter(
            (index.setdefault(tok, len(index)) for tok in local_vocab), dtype=np.int32, count=len(local_vocab)
        )
        self.ids.append(lookup[ids] if len(ids) else ids)
        self.lengths.append(lengths)

    def table(self) -> TokenIds:
        if not self.lengths:
            return empty()
        lengths = np.concatenate(self.lengths)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return TokenIds(list(self.index), np.concatenate(self.ids).astype(np.int32, copy=False), offsets)


class _WorkerProcess(multiprocessing.context.ForkServerProcess):
    """A tokenizer process whose terminate() kills: it ignores SIGTERM, so SIGTERM would not end it."""

    def terminate(self) -> None:
        self.kill()


class _WorkerContext(multiprocessing.context.ForkServerContext):
    # forkserver, not fork: workers must not inherit the trainer's threads (torch, gloo,
    # storage clients); they fork from a server that already paid the imports.
    Process = _WorkerProcess


class TokenizerPool:
    """Tokenizer processes (`tokenizer`: a TokenizerSpec or a spaCy language code), started on the
    second chunk and ended on exit.

    One chunk (a small data set) is tokenized in this process: starting workers
    would cost more than it saves. With workers=1 nothing is ever started.
    A ProcessPoolExecutor rather than a multiprocessing.Pool: a worker that dies
    (OOM killer) fails the run with BrokenProcessPool where a Pool waits forever.
    """

    def __init__(self, tokenizer: TokenizerSpec | str, workers: int | None = None, *, chunk_rows: int = 2000):
        self.spec, self.chunk_rows = as_spec(tokenizer), chunk_rows
        self.workers = default_workers() if workers is None else max(1, int(workers))
        self.used_workers = 1
        self._executor: ProcessPoolExecutor | None = None

    def __enter__(self) -> TokenizerPool:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if exc_type is not None:  # an error, KeyboardInterrupt or the trainer's interrupt: end the workers now
            # (the executor has no public way to stop running tasks; _processes is its pid -> Process map)
            for process in list(getattr(executor, "_processes", {}).values()):
                process.kill()
        executor.shutdown(wait=True, cancel_futures=True)

    def worker_pids(self) -> list[int]:
        return sorted(getattr(self._executor, "_processes", None) or {})

    def _start(self) -> ProcessPoolExecutor:
        ctx = _WorkerContext()
        # Heard only by the first pool of a process (the server lives on); the language's
        # module is included as some take seconds to import (spacy.lang.fr: ~2 s).
        preload = [f"spacy.lang.{self.spec.code}"] if self.spec.kind == SPACY else []
        ctx.set_forkserver_preload(["trainer.text.worker_preload", *preload])
        self._executor = ProcessPoolExecutor(
            self.workers,
            mp_context=ctx,
            initializer=worker.init,
            initargs=(self.spec,),
            max_tasks_per_child=CHUNKS_PER_WORKER,
        )
        self.used_workers = self.workers
        return self._executor

    def tokenize(self, texts: Iterable[str], *, on_chunk: Callable[[int, int], None] | None = None) -> TokenIds:
        """Token ids of `texts`; `on_chunk(texts, tokens)` after each chunk is merged (progress)."""
        merged = _Merger()

        def add(result: tuple[list[str], np.ndarray, np.ndarray]) -> None:
            merged.add(result)
            if on_chunk is not None:
                on_chunk(len(result[2]), len(result[1]))

        chunks = _chunks(texts, self.chunk_rows)
        first = next(chunks, None)
        if first is None:
            return empty()
        second = next(chunks, None) if self.workers > 1 else None
        if second is None and self._executor is None:
            worker.init(self.spec, ignore_signals=False)
            add(worker.tokenize_chunk(first))
            for chunk in chunks:  # workers == 1
                add(worker.tokenize_chunk(chunk))
            return merged.table()
        executor = self._executor or self._start()
        in_flight: deque = deque()
        # Results are taken in submission order; at most 2 chunks per worker wait, so memory is bounded.
        for chunk in itertools.chain([first], [second] if second is not None else [], chunks):
            if len(in_flight) >= 2 * self.workers:
                add(in_flight.popleft().result())
            in_flight.append(executor.submit(worker.tokenize_chunk, chunk))
        while in_flight:
            add(in_flight.popleft().result())
        return merged.table()


def tokenize(
    texts: Iterable[str], tokenizer: TokenizerSpec | str, *, workers: int | None = None, chunk_rows: int = 2000
) -> TokenIds:
    """Token ids of `texts` (any iterable, consumed once) with the rules and `tokenizer`
    (a language code: fastai's blank spaCy pipeline for it)."""
    with TokenizerPool(tokenizer, workers, chunk_rows=chunk_rows) as pool:
        return pool.tokenize(texts)


def first_seen_order(table: TokenIds, block: int = 1 << 24) -> np.ndarray:
    """The vocab ids that occur in `table`, in order of first occurrence (blockwise: bounded memory)."""
    unseen = np.iinfo(np.int64).max
    first = np.full(len(table.vocab), unseen, dtype=np.int64)
    for start in range(0, len(table.ids), block):
        uniq, pos = np.unique(table.ids[start : start + block], return_index=True)
        new = first[uniq] == unseen
        first[uniq[new]] = pos[new] + start
    used = np.flatnonzero(first != unseen)
    return used[np.argsort(first[used], kind="stable")]


def build_vocab(tables: list[TokenIds], *, min_freq: int, max_vocab: int) -> list[str]:
    """fastai's make_vocab over the tables' summed counts, as if over their tokens in stream order."""
    from fastai.text.data import make_vocab

    counter: Counter = Counter()
    for table in tables:
        counts = table.counts()
        # Insertion order = first occurrence: Counter.most_common breaks ties that way.
        for i in first_seen_order(table).tolist():
            counter[table.vocab[i]] += int(counts[i])
    return make_vocab(counter, min_freq=min_freq, max_vocab=max_vocab)


def remap(table: TokenIds, vocab: list[str]) -> TokenIds:
    """The same texts with ids into `vocab`; tokens missing from it become 'xxunk'."""
    index = {tok: i for i, tok in enumerate(vocab) if tok != "xxfake"}  # padding entries match nothing
    unk = index.get("xxunk", 0)
    lookup = np.fromiter((index.get(tok, unk) for tok in table.vocab), dtype=np.int32, count=len(table.vocab))
    ids = lookup[table.ids] if len(table.ids) else table.ids.astype(np.int32)
    return TokenIds(list(vocab), ids, table.offsets)
