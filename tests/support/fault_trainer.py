"""`python -m tests.support.fault_trainer TRAINER-ARGS`: the trainer, with a full disk under its file:// bucket.

FAULT_ENOSPC (a regex of bucket keys) names the writes and appends that meet ENOSPC (FAULT_TIMES of them,
default 1, after letting FAULT_SKIP through): the bytes stop half way, as on a disk that fills up during
the write, inside the real LocalBucket code (its temporary file, cleanup and error)."""

from __future__ import annotations

import builtins
import io
import os
import re
import sys
from contextlib import contextmanager

from tests.support.disk import _FullWriter
from trainer.storage.local import LocalBucket


@contextmanager
def _full_disk(room: int):
    real_fdopen, real_open = os.fdopen, builtins.open
    _FullWriter.room = room

    def fdopen(fd, mode="r", *args, **kwargs):
        return _FullWriter(io.FileIO(fd, "w")) if "w" in mode else real_fdopen(fd, mode, *args, **kwargs)

    def opener(file, mode="r", *args, **kwargs):
        if "a" in mode and "b" in mode:
            return _FullWriter(io.FileIO(file, "a"))
        return real_open(file, mode, *args, **kwargs)

    os.fdopen, builtins.open = fdopen, opener
    try:
        yield
    finally:
        os.fdopen, builtins.open = real_fdopen, real_open


def install(environ=os.environ) -> None:
    pattern = re.compile(environ["FAULT_ENOSPC"])
    times, skip = int(environ.get("FAULT_TIMES", "1")), int(environ.get("FAULT_SKIP", "0"))
    count = {"seen": 0, "hits": 0}

    def due(key: str) -> bool:
        if count["hits"] >= times or not pattern.search(key):
            return False
        count["seen"] += 1
        if count["seen"] <= skip:
            return False
        count["hits"] += 1
        print(f"fault: ENOSPC on {key}", file=sys.stderr, flush=True)
        return True

    real_write, real_append = LocalBucket.write_bytes, LocalBucket.append

    def write_bytes(self, key, data, **kw):
        if not due(key):
            return real_write(self, key, data, **kw)
        with _full_disk(len(data) // 2):
            return real_write(self, key, data, **kw)

    def append(self, key, data):
        if not due(key):
            return real_append(self, key, data)
        with _full_disk(len(data) // 2):
            return real_append(self, key, data)

    LocalBucket.write_bytes, LocalBucket.append = write_bytes, append


if __name__ == "__main__":
    install()
    from trainer.cli import main

    sys.argv = ["trainer", *sys.argv[1:]]
    sys.exit(main())
