"""Storage: one small interface over `file://` folders and `gs://` buckets, and the one place that
decides what a bucket call does when storage misbehaves.

Used by the trainer (artifacts, checkpoints, status, logs) and by trainctl (data push, run listing,
following). base.py: the `Bucket` protocol and `StorageError`; policy.py: retries, deadlines and
timeouts (settings, retry notes, and `must_land`, the longer budget of the writes a run must not lose);
local.py: folders (atomic writes, a full disk said plainly); gcs.py: buckets through google-cloud-storage
(which honours STORAGE_EMULATOR_HOST, so tests run against a real GCS API server). Callers never retry on
their own: a StorageError they get is one the policy gave up on, and `transient` says whether a later try
may succeed.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from trainer.storage.base import Bucket, StorageError
from trainer.storage.gcs import GcsBucket
from trainer.storage.local import LocalBucket
from trainer.storage.policy import StoragePolicy, must_land, on_retry

__all__ = [
    "Bucket",
    "GcsBucket",
    "LocalBucket",
    "StorageError",
    "StoragePolicy",
    "must_land",
    "on_retry",
    "open_bucket",
]


def open_bucket(uri: str, *, base_dir: Path | None = None) -> Bucket:
    """`file:///abs`, `file://relative` (against base_dir or cwd) or `gs://name[/prefix]`."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        raw = uri[len("file://") :]
        path = Path(raw)
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        return LocalBucket(path.resolve())
    if parsed.scheme == "gs":
        if not parsed.netloc:
            raise StorageError("gs:// URI without a bucket name", uri)
        return GcsBucket(parsed.netloc, parsed.path)
    raise StorageError("unsupported bucket scheme (use file:// or gs://)", uri)
