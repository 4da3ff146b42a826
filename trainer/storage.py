"""One small interface over `file://` folders and `gs://` buckets.

Used by the trainer (artifacts, status, logs) and by trainctl (data push, run
listing, following). `gs://` honours STORAGE_EMULATOR_HOST through the
google-cloud-storage client, so tests run against a real GCS API server.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import urlparse


class StorageError(Exception):
    """A storage operation failed; `uri` names the object."""

    def __init__(self, message: str, uri: str):
        super().__init__(f"{message}: {uri}")
        self.uri = uri


class Bucket(Protocol):
    uri: str

    def read_bytes(self, key: str) -> bytes: ...
    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> bool: ...
    def exists(self, key: str) -> bool: ...
    def list(self, prefix: str) -> list[str]: ...
    def download(self, key: str, dest: Path) -> None: ...
    def upload(self, src: Path, key: str) -> None: ...
    def delete(self, key: str) -> None: ...
    def open_read(self, key: str) -> BinaryIO: ...
    def url(self, key: str) -> str: ...
    def folders(self, prefix: str) -> list[str]: ...
    def read_from(self, key: str, offset: int) -> bytes | None: ...
    appends_in_place: bool  # append() is cheap (a file); else an object is rewritten whole
    def append(self, key: str, data: bytes) -> None: ...


def _join(prefix: str, key: str) -> str:
    return f"{prefix.rstrip('/')}/{key.lstrip('/')}" if prefix else key.lstrip("/")


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


class LocalBucket:
    """A folder standing in for a bucket; writes are atomic renames."""

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

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as exc:
            raise StorageError("no such object", self.url(key)) from exc

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: a bucket file gets what any new file gets
        if if_absent:
            try:  # link() fails if the target exists: create-if-absent without races
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            return True
        os.replace(tmp, path)
        return True

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    appends_in_place = True

    def folders(self, prefix: str) -> list[str]:
        """Names of the folders directly under `prefix` (ending with '/', or "") that hold a file."""
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and any(q.is_file() for q in p.rglob("*")))

    def read_from(self, key: str, offset: int) -> bytes | None:
        """The object's bytes from `offset` on; None when it does not exist."""
        path = self._path(key)
        if not path.exists():
            return None
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()

    def append(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:
            fh.write(data)

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
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(self._path(key), dest)
        except FileNotFoundError as exc:
            raise StorageError("no such object", self.url(key)) from exc

    def upload(self, src: Path, key: str) -> None:
        self.write_bytes(key, src.read_bytes())

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def open_read(self, key: str) -> BinaryIO:
        """A binary stream of the object (large files are never read whole)."""
        try:
            return open(self._path(key), "rb")
        except FileNotFoundError as exc:
            raise StorageError("no such object", self.url(key)) from exc


class GcsBucket:
    """A gs:// bucket (optionally under a prefix) through google-cloud-storage."""

    def __init__(self, name: str, prefix: str = "", client=None):
        from google.cloud import storage  # imported lazily: trainctl --help stays fast

        if client is None:
            client = storage.Client()
        self._client = client
        self._bucket = client.bucket(name)
        self.name, self.prefix = name, prefix.strip("/")
        self.uri = f"gs://{name}" + (f"/{self.prefix}" if self.prefix else "")

    def url(self, key: str) -> str:
        return f"gs://{self.name}/{_join(self.prefix, key)}"

    def _blob(self, key: str):
        return self._bucket.blob(_join(self.prefix, key))

    def read_bytes(self, key: str) -> bytes:
        from google.api_core import exceptions

        try:
            return self._blob(key).download_as_bytes()
        except exceptions.NotFound as exc:
            raise StorageError("no such object", self.url(key)) from exc

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        from google.api_core import exceptions

        if if_absent and self.exists(key):
            return False
        try:
            # A single-request upload replaces the object atomically; on real GCS the
            # generation precondition also closes the race between exists() and here.
            self._blob(key).upload_from_string(data, if_generation_match=0 if if_absent else None)
        except exceptions.PreconditionFailed:
            return False
        return True

    def exists(self, key: str) -> bool:
        return self._blob(key).exists()

    appends_in_place = False

    def folders(self, prefix: str) -> list[str]:
        """Names of the "folders" directly under `prefix` (ending with '/', or ""): the listing's prefixes."""
        full = _join(self.prefix, prefix)
        pages = self._client.list_blobs(self.name, prefix=full, delimiter="/")
        for _ in pages:  # the prefixes fill in as the pages are read
            pass
        return sorted(p[len(full):].rstrip("/") for p in pages.prefixes)

    def read_from(self, key: str, offset: int) -> bytes | None:
        """The object's bytes from `offset` on; None when it does not exist."""
        if not self.exists(key):
            return None
        return self.read_bytes(key)[offset:]

    def append(self, key: str, data: bytes) -> None:
        """Not in place: the object is read and written back whole (callers batch their appends)."""
        old = self.read_bytes(key) if self.exists(key) else b""
        self.write_bytes(key, old + data)

    def list(self, prefix: str) -> list[str]:
        full = _join(self.prefix, prefix)
        cut = len(self.prefix) + 1 if self.prefix else 0
        return sorted(b.name[cut:] for b in self._client.list_blobs(self.name, prefix=full))

    def download(self, key: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(self.read_bytes(key))

    def upload(self, src: Path, key: str) -> None:
        self._blob(key).upload_from_filename(str(src))

    def delete(self, key: str) -> None:
        from google.api_core import exceptions

        try:
            self._blob(key).delete()
        except exceptions.NotFound:
            pass

    def open_read(self, key: str) -> BinaryIO:
        """The object spooled to local disk (a VM's boot disk holds what a corpus needs), then streamed."""
        from google.api_core import exceptions

        spool = tempfile.TemporaryFile()
        try:
            self._blob(key).download_to_file(spool)
        except exceptions.NotFound as exc:
            spool.close()
            raise StorageError("no such object", self.url(key)) from exc
        spool.seek(0)
        return spool


def open_bucket(uri: str, *, base_dir: Path | None = None) -> Bucket:
    """`file:///abs`, `file://relative` (against base_dir or cwd) or `gs://name[/prefix]`."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        raw = uri[len("file://"):]
        path = Path(raw)
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        return LocalBucket(path.resolve())
    if parsed.scheme == "gs":
        if not parsed.netloc:
            raise StorageError("gs:// URI without a bucket name", uri)
        return GcsBucket(parsed.netloc, parsed.path)
    raise StorageError("unsupported bucket scheme (use file:// or gs://)", uri)

