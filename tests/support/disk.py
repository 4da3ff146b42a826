"""A disk that fills up: a size-limited tmpfs where this machine lets a test mount one, else ENOSPC injected
at the same place a full disk raises it (the write of a file's bytes)."""

from __future__ import annotations

import errno
import io
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path


def _mount(path: Path, size: int) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    return done.returncode == 0


class _FullWriter(io.BufferedWriter):
    """A file whose writes stop with ENOSPC once `room` bytes were written (what a full disk does)."""

    room = 0

    def write(self, data) -> int:
        if len(data) > type(self).room:
            ok = bytes(data)[: type(self).room]
            super().write(ok)
            super().flush()  # the bytes that fitted are on the disk, as the kernel leaves them
            type(self).room -= len(ok)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        type(self).room -= len(data)
        return super().write(data)


@contextmanager
def small_disk(path: Path, size: int, monkeypatch, *, how: str = "tmpfs"):
    """`path` as a folder on a disk of `size` bytes; yields "tmpfs" or "injected" (a tmpfs where the machine
    allows and `how` asks for one)."""
    path.mkdir(parents=True, exist_ok=True)
    if how == "tmpfs" and _mount(path, size):
        try:
            yield "tmpfs"
        finally:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
        return
    # No mount here: files opened for writing under `path` share `size` bytes and then fail as a full disk does.
    real_fdopen, real_open = os.fdopen, open
    _FullWriter.room = size

    def inside(name) -> bool:
        return str(name).startswith(str(path))

    def fdopen(fd, mode="r", *args, **kwargs):
        name = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
        if "w" in mode and "b" in mode and inside(name):
            return _FullWriter(io.FileIO(fd, "w"))
        return real_fdopen(fd, mode, *args, **kwargs)

    def opener(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and ("w" in mode or "a" in mode) and "b" in mode and inside(file):
            return _FullWriter(io.FileIO(file, mode.replace("b", "")))
        return real_open(file, mode, *args, **kwargs)

    with monkeypatch.context() as patched:  # undone on leaving, without touching the test's other patches
        patched.setattr("trainer.storage.local.os.fdopen", fdopen)
        patched.setattr("builtins.open", opener)
        yield "injected"
