"""The run's voice: status.json updates and log.txt lines, in the bucket.

Log lines go to stdout and to `<run>/log.txt`, appended (on gs://, one piece per flush: the log is
never read back or rewritten), at most every `flush_every_s` and always on status changes and at
the end. A log that cannot be written keeps its lines for the next flush.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timezone

from trainer.runfiles.keys import run_key
from trainer.runfiles.status_file import FAILED, RUNNING, SUCCEEDED, RunStatus, write_status
from trainer.runfiles.timestamps import now_iso
from trainer.storage import Bucket, StorageError, must_land


class RunLog:
    def __init__(self, bucket: Bucket, status: RunStatus, *, flush_every_s: float = 5.0):
        self.bucket, self.status = bucket, status
        self.flush_every_s = flush_every_s
        self._pending: list[str] = []
        self._last_flush = 0.0
        self._key = run_key(status.lang, status.run_id, "log.txt")

    def line(self, message: str) -> None:
        self.note(message)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def note(self, message: str) -> None:
        """A line for the next flush, never written now (storage's retry notes arrive during a bucket call)."""
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for part in str(message).splitlines() or [""]:
            text = f"{stamp} {part}\n"
            print(text, end="", flush=True)
            self._pending.append(text)

    def flush(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []  # notes that arrive during the append wait for the next flush
        try:
            self.bucket.append(self._key, "".join(batch).encode("utf-8"))
        except StorageError as exc:  # the storage policy gave up: the lines wait for the next flush
            print(f"log.txt not written ({exc}); its lines are kept for the next write", flush=True)
            self._pending = batch + self._pending
        except BaseException:
            self._pending = batch + self._pending
            raise
        self._last_flush = time.monotonic()

    def close(self, *, seal: bool = True) -> None:
        """The last flush, then the log written whole as `log.txt` where it went up in pieces (gs://). Not
        when interrupted: a preempted VM has seconds, and the resumed run goes on appending."""
        self.flush()
        if not seal:
            return
        try:
            self.bucket.seal_appended(self._key)
        except StorageError as exc:  # the pieces hold every line: readers still have the whole log
            print(f"log.txt not sealed ({exc}); its pieces hold every line", flush=True)

    def update(self, **fields) -> None:
        """Change status fields and write status.json (log flushed first)."""
        for key, value in fields.items():
            setattr(self.status, key, value)
        self.flush()
        if self.status.terminal:  # the run's end must land (trainer.storage.must_land)
            # if it never does, the error goes up: the supervisor or VM agent records the end (a SUCCEEDED
            # run's artifacts are all there)
            must_land(
                lambda: write_status(self.bucket, self.status),
                self.bucket,
                what=f"status.json ({self.status.state})",
                say=lambda text: print(text, flush=True),
            )
            return
        try:
            write_status(self.bucket, self.status)
        except StorageError as exc:  # mid-run, the next update rewrites the whole status: a missed write is only late
            print(f"status.json not written ({exc}); the next update writes it", flush=True)

    def started(self) -> None:
        # error: an interruption's note ("preempted: checkpoint saved at ..."), stale once the run trains again
        self.update(state=RUNNING, host=socket.gethostname(), pid=os.getpid(), error=None)

    def succeeded(self) -> None:
        self.update(state=SUCCEEDED, stage="done", finished_at=now_iso(), error=None, progress=None)

    def failed(self, error: str) -> None:
        self.line(f"FAILED: {error}")
        self.update(state=FAILED, finished_at=now_iso(), error=error, progress=None)


class QuietLog:
    """The log of ranks > 0: rank 0 owns status.json and log.txt, so these only print errors."""

    def line(self, message: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self, *, seal: bool = True) -> None:
        pass

    def update(self, **fields) -> None:
        pass

    def failed(self, error: str) -> None:
        print(f"FAILED: {error}", flush=True)
