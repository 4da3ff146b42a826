"""How long a bucket call may take and how it is retried: one policy, read once per process.

Transient failures (429, 408, 5xx, a connection reset or cut, a read that stalls past `timeout_s`)
are retried with exponential backoff until `deadline_s`; anything else (404, 403, 412, a bad
request) is not. Each retry is reported once, with its error, to the process's listeners (the
trainer puts it in the run log). A write the run must not lose (an artifact, the final status) is
made again whole when a call gave up on a transient failure (`must_land`: `rounds` calls, each
under the deadline). Settings, for a VM left alone for hours or a test that wants seconds:
TRAINSTACK_STORAGE_DEADLINE_S (default 300), TRAINSTACK_STORAGE_TIMEOUT_S (60, per request),
TRAINSTACK_STORAGE_BACKOFF_S (1, the first wait), TRAINSTACK_STORAGE_MAX_BACKOFF_S (32) and
TRAINSTACK_STORAGE_ROUNDS (3).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TypeVar

from trainer.storage.base import StorageError

ENV_PREFIX = "TRAINSTACK_STORAGE_"
_listeners: list[Callable[[str], None]] = []
T = TypeVar("T")


@dataclass(frozen=True)
class StoragePolicy:
    deadline_s: float = 300.0  # the whole call, retries included
    timeout_s: float = 60.0  # one request: connecting, and each read of the answer
    backoff_s: float = 1.0
    max_backoff_s: float = 32.0
    chunk_mib: int = 8  # resumable uploads go in chunks of this size; a retry resumes at the last one stored
    rounds: int = 3  # a write the run must not lose: whole calls, each under deadline_s (must_land)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> StoragePolicy:
        values = {}
        for f in fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            try:
                value = type(f.default)(float(raw))
            except ValueError:
                raise ValueError(f"{ENV_PREFIX}{f.name.upper()}={raw!r} is not a number") from None
            if value <= 0:
                raise ValueError(f"{ENV_PREFIX}{f.name.upper()}={raw!r} must be above 0")
            values[f.name] = value
        return cls(**values)


def on_retry(listener: Callable[[str], None]) -> Callable[[], None]:
    """Adds a listener for retry notes; returns the function that removes it."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


def report_retry(message: str) -> None:
    """A retry note goes to every listener (the run log), or to stderr when none listens; a listener's
    failure never reaches the call it reports."""
    if not _listeners:
        print(message, file=sys.stderr, flush=True)
    for listener in list(_listeners):
        try:
            listener(message)
        except Exception:  # a listener's failure must not turn a retried call into a failed one
            pass


def must_land(call: Callable[[], T], bucket, *, what: str, say: Callable[[str], None]) -> T:
    """`call()` (one call on `bucket`, already under its policy), made again while it gives up on a transient
    failure: the policy's `rounds` calls in all, waiting 10, 20, ... x backoff_s between them, each wait said
    through `say`. For the writes a run must not lose (an artifact, its final status), where an outage of a few
    minutes should cost a wait, not the run. A permanent failure, or the last round's, is raised.

    A file:// folder has no policy of its own: the defaults apply."""
    p = getattr(bucket, "policy", None) or StoragePolicy()
    rounds = getattr(p, "rounds", StoragePolicy.rounds)  # a stand-in policy may carry backoff_s alone
    for n in range(1, rounds):
        try:
            return call()
        except StorageError as exc:
            if not exc.transient:
                raise
            wait = 10.0 * n * p.backoff_s
            say(f"{what} failed ({exc.message}); trying again in {wait:.0f} s (round {n + 1} of {rounds})")
            time.sleep(wait)
    return call()
