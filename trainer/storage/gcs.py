"""A gs:// bucket through google-cloud-storage, every call under the process's StoragePolicy.

Each call passes its own retry (transient errors only, backoff up to the deadline, each retry
reported) and a per-request timeout; the library's defaults (which skip unconditional uploads)
are not relied on. Our unconditional writes are safe to repeat: every key has one writer at a
time (status.json: the run's owner; artifacts: rank 0), so a retried upload writes the same bytes.
"""

from __future__ import annotations

import base64
import itertools
import mimetypes
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from trainer.storage.base import StorageError, join_key
from trainer.storage.checksums import Checksum
from trainer.storage.local import disk_error
from trainer.storage.policy import StoragePolicy, report_retry

PARTS = ".parts/"  # an appended object is the pieces under `<key>.parts/`, in name order
_piece_seq = itertools.count()


def _hex(encoded: str | None) -> str | None:
    """A digest as the JSON API gives it (base64) in hex, as Checksum keeps it."""
    return base64.b64decode(encoded).hex() if encoded else None


class _ReportingReader:
    """A file as the client library reads it (a chunk at a time, seeking back on a retry), telling `progress` the
    offset each read reaches."""

    def __init__(self, fh: BinaryIO, progress: Callable[[int], None]):
        self._fh, self._progress = fh, progress

    def read(self, size: int = -1) -> bytes:
        data = self._fh.read(size)
        self._progress(self._fh.tell())
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()


def _brief(exc: BaseException) -> str:
    response = getattr(exc, "response", None)  # the library's InvalidResponse: the HTTP answer it did not expect
    if response is not None and getattr(response, "status_code", None):
        return f"{response.status_code} {getattr(response, 'reason', '') or ''}".strip()
    code = getattr(exc, "code", None)
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = " ".join(str(text).split())[:160]
    return f"{code} {text}" if code else f"{type(exc).__name__}: {text}"


# What `trainctl` and a run need in the bucket before anything is applied (objects.delete, for `gc` and
# pruned checkpoints, is not asked: a run works without it).
RUN_PERMISSIONS = ("storage.objects.list", "storage.objects.get", "storage.objects.create")


class GcsBucket:
    """A gs:// bucket (optionally under a prefix)."""

    def __init__(
        self,
        name: str,
        prefix: str = "",
        client=None,
        policy: StoragePolicy | None = None,
        report: Callable[[str], None] = report_retry,
    ):
        """`report` hears each retry (the process's listeners by default)."""
        from google.cloud import storage  # imported lazily: trainctl --help stays fast

        if client is None:
            client = storage.Client()
        self._client = client
        self._bucket = client.bucket(name)
        self.name, self.prefix = name, prefix.strip("/")
        self.uri = f"gs://{name}" + (f"/{self.prefix}" if self.prefix else "")
        self.policy = policy or StoragePolicy.from_env()
        self._appending: set[str] = set()  # keys this process has appended to
        self._report = report

    def url(self, key: str) -> str:
        return f"gs://{self.name}/{join_key(self.prefix, key)}"

    def _blob(self, key: str):
        return self._bucket.blob(join_key(self.prefix, key))

    def _upload_blob(self, key: str):
        """A blob to write: large files go up chunk by chunk (set on reads, chunk_size would make downloads
        ranged and unchecked)."""
        blob = self._blob(key)
        blob.chunk_size = self.policy.chunk_mib * 1024 * 1024
        return blob

    def _run(self, doing: str, key: str, call, *, missing_ok: bool = False, retried: list | None = None):
        """`call(retry=, timeout=)` under the policy; failures become StorageError (None for a missing object
        with `missing_ok`). Each retry's error is reported, and added to `retried` when given."""
        from google.api_core import exceptions
        from google.api_core.retry import Retry
        from google.auth.exceptions import GoogleAuthError
        from google.cloud.storage.exceptions import DataCorruption
        from google.cloud.storage.retry import DEFAULT_RETRY

        p, tries = self.policy, itertools.count(1)

        def note(exc: Exception) -> None:
            if retried is not None:
                retried.append(exc)
            self._report(
                f"storage: {doing} {self.url(key)}: {_brief(exc)}; retry {next(tries)} "
                f"(retrying for up to {p.deadline_s:g} s)"
            )

        transient = DEFAULT_RETRY._predicate  # the library's own rule: 408, 429, 5xx, resets, cuts, timeouts
        retry = Retry(
            predicate=transient,
            initial=p.backoff_s,
            maximum=p.max_backoff_s,
            multiplier=2.0,
            timeout=p.deadline_s,
            on_error=note,
        )
        started = time.monotonic()
        try:
            return call(retry=retry, timeout=p.timeout_s)
        except exceptions.NotFound as exc:
            if doing == "list" or "bucket does not exist" in str(exc).lower():  # a listing 404s only without a bucket
                raise StorageError(
                    f"no such bucket gs://{self.name} (create it, or set `bucket` in the env's "
                    "overlay to one that exists)",
                    self.url(key),
                    bad_input=True,
                ) from exc
            if missing_ok:
                return None
            raise StorageError("no such object", self.url(key)) from exc
        except exceptions.RetryError as exc:
            cause = exc.cause or exc
            raise StorageError(
                f"{doing} gave up after {time.monotonic() - started:.0f} s of retries ({_brief(cause)})",
                self.url(key),
                transient=True,
            ) from exc
        except exceptions.Forbidden as exc:
            raise StorageError(
                f"{doing}: permission denied ({_brief(exc)}; the caller needs "
                f"roles/storage.objectAdmin on gs://{self.name})",
                self.url(key),
                bad_input=True,
            ) from exc
        except exceptions.PreconditionFailed:
            raise
        except (GoogleAuthError, DataCorruption) as exc:  # credentials that cannot refresh; bytes that arrived wrong
            raise StorageError(
                f"{doing} failed ({_brief(exc)})",
                self.url(key),
                transient=isinstance(exc, DataCorruption) or bool(transient(exc)),
            ) from exc
        except Exception as exc:
            if isinstance(exc, exceptions.GoogleAPICallError) or transient(exc):
                raise StorageError(
                    f"{doing} failed ({_brief(exc)})", self.url(key), transient=bool(transient(exc))
                ) from exc
            raise

    def check_access(self, prefix: str) -> None:
        """A listing under `prefix`, then the bucket's testIamPermissions for what a run writes: a missing
        bucket or role is said now, before anything is built. A listing alone let an account holding only
        objectViewer through, to fail at its first write after the apply."""
        full = join_key(self.prefix, prefix)
        self._run(
            "list", prefix, lambda **kw: list(self._client.list_blobs(self.name, prefix=full, max_results=1, **kw))
        )
        granted = self._run(
            "check permissions on",
            prefix,
            lambda **kw: self._bucket.test_iam_permissions(
                list(RUN_PERMISSIONS), timeout=kw["timeout"], retry=kw["retry"]
            ),
        )
        missing = [p for p in RUN_PERMISSIONS if p not in (granted or [])]
        if missing:
            raise StorageError(
                f"this account lacks {', '.join(missing)} on gs://{self.name} (a run writes its "
                "metadata, status and artifacts there): grant it roles/storage.objectUser on the "
                "bucket",
                self.url(prefix),
                bad_input=True,
            )

    def read_bytes(self, key: str) -> bytes:
        return self._run("read", key, self._blob(key).download_as_bytes)

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        from google.api_core import exceptions

        name = join_key(self.prefix, key)
        for _ in range(10):
            blob = self._run("read", key, lambda **kw: self._bucket.get_blob(name, **kw), missing_ok=True)
            if blob is None:
                return None
            generation = blob.generation  # before the download, which resets it from the answer's headers
            try:
                data = self._run(
                    "read",
                    key,
                    lambda **kw: blob.download_as_bytes(if_generation_match=generation, **kw),  # noqa: B023 (called now)
                    missing_ok=True,
                )
            except exceptions.PreconditionFailed:
                continue  # replaced between the two calls: read the new one
            if data is not None:
                return data, str(generation)
        raise StorageError("the object kept changing while it was read", self.url(key), transient=True)

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None) -> bool:
        from google.api_core import exceptions

        match = 0 if if_absent else (int(if_version) if if_version is not None else None)
        blob, retried = self._upload_blob(key), []
        try:
            self._run(
                "write",
                key,
                lambda **kw: blob.upload_from_string(data, if_generation_match=match, **kw),
                retried=retried,
            )
        except exceptions.PreconditionFailed:
            # After a retry, the object that is there may be our own first try, answered but not heard.
            return bool(retried) and self._run("read", key, blob.download_as_bytes, missing_ok=True) == data
        return True

    def exists(self, key: str) -> bool:
        return bool(self._run("look up", key, self._blob(key).exists))

    def folders(self, prefix: str) -> list[str]:
        """Names of the "folders" directly under `prefix` (ending with '/', or ""): the listing's prefixes."""
        full = join_key(self.prefix, prefix)

        def listing(retry, timeout):
            pages = self._client.list_blobs(self.name, prefix=full, delimiter="/", retry=retry, timeout=timeout)
            for _ in pages:  # the prefixes fill in as the pages are read
                pass
            return pages.prefixes

        return sorted(p[len(full) :].rstrip("/") for p in self._run("list", prefix, listing))

    def _listed(self, prefix: str) -> list:
        full = join_key(self.prefix, prefix)
        return self._run("list", prefix, lambda **kw: list(self._client.list_blobs(self.name, prefix=full, **kw)))

    def list(self, prefix: str) -> list[str]:
        cut = len(self.prefix) + 1 if self.prefix else 0
        return sorted(b.name[cut:] for b in self._listed(prefix))

    def append(self, key: str, data: bytes) -> None:
        """One new piece per call (no read-modify-write): bytes written grow with the log, not its square.

        Pieces are named by the writer's clock, host, process and count, so readers put every writer's
        lines in order and no writer ever replaces another's."""
        if key not in self._appending:  # a log written whole before pieces: its lines become the first piece
            self._appending.add(key)
            names = self.list(key)
            if key in names and not any(n.startswith(key + PARTS) for n in names):
                self.write_bytes(f"{key}{PARTS}{0:020d}-before-pieces", self.read_bytes(key))
        piece = f"{time.time_ns():020d}-{socket.gethostname()}-{os.getpid()}-{next(_piece_seq):06d}"
        self.write_bytes(f"{key}{PARTS}{piece}", data)

    def read_appended(self, key: str, after: object = None) -> tuple[bytes, object]:
        """What was appended since `after` (the set of pieces already read; None: from the start), and the new cursor.

        The pieces, in name order; without pieces, the object written whole under `key` (a log from before
        pieces, or sealed and its pieces gone)."""
        seen = frozenset(after or ())
        if key in seen:  # the whole object was read: its copy as the first piece (`append`) holds the same lines
            seen |= {f"{key}{PARTS}{0:020d}-before-pieces"}
        cut = len(self.prefix) + 1 if self.prefix else 0
        names = [b.name[cut:] for b in self._listed(key)]
        pieces = sorted(n for n in names if n.startswith(key + PARTS))
        new = [n for n in (pieces or [n for n in names if n == key]) if n not in seen]
        data = b"".join(self.read_bytes(n) for n in new)
        return data, seen | set(new)

    def seal_appended(self, key: str) -> None:
        """Writes the pieces whole under `key` itself (DESIGN's `<run>/log.txt`), once, when the writer ends:
        one more copy of the log, so the bytes written stay linear in its length. The pieces stay for readers."""
        data, _ = self.read_appended(key)
        if data:
            self.write_bytes(key, data)

    def download(self, key: str, dest: Path) -> None:
        """Through a temporary file beside `dest`: a failed download never leaves a partial `dest`."""
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
            os.close(fd)
        except OSError as exc:
            raise disk_error(exc, dest) from exc
        try:
            self._run("download", key, lambda **kw: self._blob(key).download_to_filename(tmp, **kw))
            os.replace(tmp, dest)
        except OSError as exc:
            raise disk_error(exc, dest) from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def upload(self, src: Path, key: str, *, progress: Callable[[int], None] | None = None) -> None:
        """Files above one chunk go up as a resumable upload, read a chunk at a time: a retry resumes after the
        last chunk stored. `progress` hears how far the reads have got."""
        content_type = mimetypes.guess_type(str(src))[0]  # what upload_from_filename would send
        with open(src, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            stream = _ReportingReader(fh, progress) if progress is not None else fh
            self._run(
                "upload",
                key,
                lambda **kw: self._upload_blob(key).upload_from_file(
                    stream, size=size, content_type=content_type, **kw
                ),
            )

    def checksum(self, key: str) -> Checksum | None:
        """From the object's metadata, nothing downloaded: md5 where Cloud Storage keeps one (not for a composite
        object), crc32c always; None when there is no such object."""
        name = join_key(self.prefix, key)
        blob = self._run("look up", key, lambda **kw: self._bucket.get_blob(name, **kw), missing_ok=True)
        if blob is None:
            return None
        return Checksum(md5=_hex(blob.md5_hash), crc32c=_hex(blob.crc32c))

    def delete(self, key: str) -> None:
        self._run("delete", key, self._blob(key).delete, missing_ok=True)

    def open_read(self, key: str) -> BinaryIO:
        """The object spooled to local disk (a VM's boot disk holds what a corpus needs), then streamed."""
        spool = tempfile.TemporaryFile()
        try:
            self._run("download", key, lambda **kw: self._blob(key).download_to_file(spool, **kw))
        except OSError as exc:
            spool.close()
            raise disk_error(exc, Path(tempfile.gettempdir())) from exc
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return spool
