"""A run's files that never reached the bucket outlive the VM.

When an artifact cannot be uploaded after its retry rounds, the trainer keeps its work folder
(KEPT_MARK) and fails the run; on a VM that folder is inside the container, which goes with the
VM as soon as node 0 resizes the group to zero. The agent copies it first, with the storage
policy's own retries, to `kept_bucket` (the env's config: another bucket, for when the run's bucket
is the one refusing) or else to `<lang>/runs/<run-id>/kept/<node>/` of the run's bucket.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer.launchers.vm import log
from trainer.runfiles.keys import KEPT_MARK, run_key
from trainer.runfiles.status_file import read_status, write_status
from trainer.storage import open_bucket

WORK_ROOT = "/home/trainer/work"  # the trainer image's home (WORKDIR), writable by its user
WORK_ROOT_ENV = "TRAINSTACK_WORK_ROOT"  # tests


def work_dir(run_id: str) -> Path:
    """The `--work-dir` the agent gives the trainer of `run_id` (ranks > 0 write to rank<N>/ inside)."""
    return Path(os.environ.get(WORK_ROOT_ENV, WORK_ROOT)) / run_id


def destination(spec, node: str) -> tuple[object, str]:
    """(bucket, key prefix) where `node`'s kept files go."""
    if spec.kept_bucket:
        return open_bucket(spec.kept_bucket), f"{spec.lang}/{spec.run_id}/{node}"
    return open_bucket(spec.bucket), run_key(spec.lang, spec.run_id, f"kept/{node}")


def rescue(spec, node: str) -> str | None:
    """Copies this node's work folder when it holds KEPT_MARK -> where it went (None: nothing kept, or the copy
    failed, which is logged); the run's FAILED error says where."""
    root = work_dir(spec.run_id)
    if not root.is_dir() or not any(root.rglob(KEPT_MARK)):
        return None
    files = sorted(p for p in root.rglob("*") if p.is_file())
    try:
        bucket, base = destination(spec, node)
        for path in files:
            bucket.upload(path, f"{base}/{path.relative_to(root).as_posix()}")
        where = bucket.url(base)
    except Exception as exc:  # the VM is about to go: say what is lost and why, never hide the run's end
        log(
            f"could not copy the kept work folder {root} ({len(files)} files): {exc}; it is lost with this VM "
            "(set kept_bucket in the env to a bucket the trainer account may write)"
        )
        return None
    log(f"the run's files that never reached the bucket ({len(files)} in {root}) are copied to {where}")
    try:
        run_bucket = open_bucket(spec.bucket)
        status = read_status(run_bucket, spec.lang, spec.run_id)
        if status is not None and status.error and where not in status.error:
            status.error = f"{status.error}; copied to {where} before the VM went away"
            write_status(run_bucket, status)
    except Exception as exc:  # the copy is what matters; the note is a courtesy
        log(f"could not add where the kept files went to status.json: {exc}")
    return where
