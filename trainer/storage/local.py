"""A folder standing in for a bucket: atomic writes, versions for conditional writes, a full disk said plainly."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from trainer.storage.base import StorageError
from trainer.storage.checksums import CHUNK, Checksum, stream_checksum


def _umask() -> int:
    """The process's umask: from /proc (Linux), else by setting it and straight back under a lock (a thread
    creating a file in between would get 022 for a moment)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


_UMASK_LOCK = threading.Lock()


def _version(path: Path) -> str | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"


def disk_error(exc: OSError, path: Path, needed: int | None = None) -> StorageError:
    """ENOSPC/EDQUOT as one line naming the path and the space asked for; other OS errors with their reason."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        try:
            free = shutil.disk_usage(next(p for p in (path, *path.parents) if p.exists())).free
        except (OSError, StopIteration):
            free = None
        need = f"{needed:,} bytes needed" if needed is not None else "space needed"
        have = f", {free:,} free" if free is not None else ""
        return StorageError(
            f"no space left on the device ({need}{have}; free some space or use a larger disk)", f"file://{path}"
        )
    return StorageError(f"{exc.strerror or exc}", f"file://{path}")


class LocalBucket:
    """A folder standing in for a bucket; writes are atomic renames, never a half-written object."""

    def __init__(self, root: Path):
        self.root = root
        self.uri = f"file://{root}"

    def _path(self, key: str) -> Path:
        path = (self.root / key.lstrip("/")).resolve()
        if self.root.resolve() not in path.parents and path != self.root.resolve():
            raise StorageError("key escapes the bucket", f"{self.uri}/{key}")
        return path

    def url(self, key: str) -> str:
        return f"file://{self._path(key)}"

    @contextmanager
    def _locked(self, path: Path):
        """Writers in one folder take turns (across processes, a lock on the folder itself: no lock files), so a
        conditional write's check and its rename are one step."""
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _no_root(self, key: str, exc: OSError | None = None) -> StorageError | None:
        """The bucket folder itself is missing (a typo in `bucket`, a disk not mounted): said as that, not
        as a missing object or a bare OS error; None while it exists. `exc`: why it could not be created."""
        if self.root.is_dir():
            return None
        missing = f"the bucket folder {self.root} does not exist"
        message = f"{missing} and cannot be created ({exc.strerror or exc})" if exc else f"no such object: {missing}"
        return StorageError(
            message,
            self.url(key),
            bad_input=True,
            hint=f"create it (mkdir -p {self.root}), or point `bucket` at a folder that "
            "exists (envs/ENV.yaml or --set bucket=file:///PATH)",
        )

    def _write_error(self, exc: OSError, path: Path, key: str, needed: int | None) -> StorageError:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return disk_error(exc, path, needed)
        return self._no_root(key, exc) or disk_error(exc, path, needed)

    def check_access(self, prefix: str) -> None:
        """The nearest existing folder of `prefix` must be writable (the rest is created on the first write)."""
        path = self._path(prefix) if prefix else self.root
        near = next((p for p in (path, *path.parents) if p.exists()), None)
        if near is not None and not (near.is_dir() and os.access(near, os.W_OK | os.X_OK)):
            raise StorageError(f"cannot write under {near} (not a writable folder)", self.url(prefix), bad_input=True)

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as exc:
            raise self._no_root(key) or StorageError("no such object", self.url(key)) from exc

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        path = self._path(key)
        for _ in range(10):  # a replace between stat and read: read again
            before = _version(path)
            if before is None:
                return None
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            if _version(path) == before:
                return data, before
        raise StorageError("the object kept changing while it was read", self.url(key), transient=True)

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None) -> bool:
        return self._publish(key, lambda fh: fh.write(data), len(data), if_absent=if_absent, if_version=if_version)

    def _publish(
        self,
        key: str,
        fill: Callable[[BinaryIO], object],
        needed: int,
        *,
        if_absent: bool = False,
        if_version: str | None = None,
    ) -> bool:
        """A temporary file beside the object, written by `fill`, becomes the object in one rename (or link, for
        `if_absent`); `needed`: the bytes it takes, for a full disk's message."""
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        except OSError as exc:
            raise self._write_error(exc, path, key, needed) from exc
        try:
            with os.fdopen(fd, "wb") as fh:
                fill(fh)
                fh.flush()
                os.fsync(fh.fileno())  # the rename below must never publish bytes still in flight
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: a bucket file gets what any new file gets
            if if_absent:
                try:  # link() fails if the target exists: create-if-absent without races
                    os.link(tmp, path)
                except FileExistsError:
                    return False
                return True
            with self._locked(path):
                if if_version is not None and _version(path) != if_version:
                    return False
                os.replace(tmp, path)
            return True
        except OSError as exc:
            raise disk_error(exc, path, needed) from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def folders(self, prefix: str) -> list[str]:
        """Names of the folders directly under `prefix` (ending with '/', or "") that hold an object."""
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(
            p.name
            for p in base.iterdir()
            if p.is_dir() and any(q.is_file() and not q.name.startswith(".") for q in p.rglob("*"))
        )

    def append(self, key: str, data: bytes) -> None:
        """Each call's bytes land whole and in order, whoever else appends (writers take turns on the file);
        a write the disk cuts short is taken back, so a retried append never leaves half a line."""
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab", buffering=0) as fh:  # unbuffered: nothing of a failed write is left to flush
                fcntl.flock(fh, fcntl.LOCK_EX)
                size = os.fstat(fh.fileno()).st_size
                try:
                    view = memoryview(data)
                    while view:
                        view = view[fh.write(view) :]
                except OSError:
                    os.ftruncate(fh.fileno(), size)
                    raise
        except OSError as exc:
            raise self._write_error(exc, path, key, len(data)) from exc

    def read_appended(self, key: str, after: object = None) -> tuple[bytes, object]:
        """The whole lines appended since `after` (a cursor this returned; None: from the start), and the new cursor."""
        offset = int(after or 0)
        try:
            with open(self._path(key), "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
        except FileNotFoundError:
            return b"", offset
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next call
        return chunk[:end], offset + end

    def seal_appended(self, key: str) -> None:
        """Nothing to do: the file is the whole log."""

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if base.is_file():
            return [prefix]
        if not base.is_dir():
            return []
        out = []
        for path in base.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                out.append(path.relative_to(self.root).as_posix())
        return sorted(out)

    def download(self, key: str, dest: Path) -> None:
        """Through a temporary file beside `dest`: a failed copy never leaves a partial `dest`."""
        src = self._path(key)
        tmp = dest.parent / f".{dest.name}.part"
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, tmp)
            os.replace(tmp, dest)
        except FileNotFoundError as exc:
            raise self._no_root(key) or StorageError("no such object", self.url(key)) from exc
        except OSError as exc:
            raise disk_error(exc, dest, src.stat().st_size if src.exists() else None) from exc
        finally:
            tmp.unlink(missing_ok=True)

    def upload(self, src: Path, key: str, *, progress: Callable[[int], None] | None = None) -> None:
        """Copied a chunk at a time (a large file is never read whole), published in one rename."""

        def copy(fh: BinaryIO) -> None:
            sent = 0
            with open(src, "rb") as source:
                while chunk := source.read(CHUNK):
                    fh.write(chunk)
                    sent += len(chunk)
                    if progress is not None:
                        progress(sent)

        self._publish(key, copy, src.stat().st_size)

    def checksum(self, key: str) -> Checksum | None:
        """md5 and crc32c of the stored file, read a chunk at a time; None when there is no such object."""
        try:
            with open(self._path(key), "rb") as fh:
                return stream_checksum(fh)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None  # no such object (a path through a file too: writing there says what is wrong)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def open_read(self, key: str) -> BinaryIO:
        """A binary stream of the object (large files are never read whole)."""
        try:
            return open(self._path(key), "rb")
        except FileNotFoundError as exc:
            raise self._no_root(key) or StorageError("no such object", self.url(key)) from exc
