"""Tokenizing the next batch in another process while this one runs the model on the current one.

Tokenizing (the text rules, then spaCy or SentencePiece) costs about what the model does per row, and
holds the GIL throughout, so a thread would only take turns with the model's Python: a process runs
beside it. The worker is forked from the process that loaded the model, so it starts at once with the
tokenizer and vocabulary already in memory (nothing pickled but each batch's texts and ids). It only
tokenizes, never runs torch, so forking after torch loaded is safe.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np

_served = None  # the worker's ServedModel, inherited through fork


def usable_cores() -> int:
    """The cores this process may run on (taskset, a container's cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def _init(served) -> None:
    global _served
    _served = served
    # Ctrl-C and SIGTERM reach the whole process group: the parent decides and ends the worker itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _ids(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The texts' ids as one flat array and the lengths (a few arrays cross the pipe, not one per text)."""
    rows = _served.tokenize(texts).ids
    lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    return (np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)), lengths


class TokenizeAhead:
    """`submit(texts)` -> a Future of `served.tokenize(texts)`, computed by a forked worker. Only for a
    model served on padded batches (served.text_model), on a machine with a core to spare (usable_cores)."""

    def __init__(self, served):
        self.served = served
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> "TokenizeAhead":
        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"),
                                         initializer=_init, initargs=(self.served,))
        self._pool.submit(int).result()  # forks the worker now, while this process runs no other thread
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, texts: list[str]) -> Future:
        from trainer.serving.served_model import TokenizedTexts

        texts = list(texts)
        tokenized: Future = Future()

        def unpack(done: Future) -> None:
            try:
                flat, lengths = done.result()
            except BaseException as exc:  # the worker's error (or its death), raised where the result is read
                tokenized.set_exception(exc)
                return
            tokenized.set_result(TokenizedTexts(texts, np.split(flat, np.cumsum(lengths)[:-1])))

        self._pool.submit(_ids, texts).add_done_callback(unpack)
        return tokenized
