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

import os
from importlib import import_module
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


# Schemes of targets outside this package: "scheme=package.module:function,..." (the operator's registry,
# stacks/config/targets.py, sets it for itself and every process it starts: Terraform, launchers, trainers).
OPENERS_ENV = "TRAINSTACK_BUCKET_OPENERS"


def opener_of(scheme: str):
    """The function opening `scheme://` URIs that OPENERS_ENV names, or None."""
    for entry in filter(None, os.environ.get(OPENERS_ENV, "").split(",")):
        name, _, code = entry.partition("=")
        if name.strip() == scheme:
            module, _, attribute = code.strip().partition(":")
            try:
                return getattr(import_module(module), attribute)
            except (ImportError, AttributeError) as exc:
                raise StorageError(
                    f"{OPENERS_ENV} names {code.strip()} for {scheme}://, which is not there: {exc}", f"{scheme}://"
                ) from exc
    return None


def open_bucket(uri: str, *, base_dir: Path | None = None) -> Bucket:
    """`file:///abs`, `file://relative` (against base_dir or cwd), `gs://name[/prefix]`, or a scheme OPENERS_ENV
    names (its function is called with the URI and base_dir)."""
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
    opener = opener_of(parsed.scheme)
    if opener is not None:
        return opener(uri, base_dir=base_dir)
    raise StorageError("unsupported bucket scheme (use file:// or gs://)", uri)
