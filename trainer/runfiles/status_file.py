"""status.json: a run's state, stage and progress (`RunStatus`), read, written, and marked FAILED by a
watcher without ever replacing a success. Light on purpose (stdlib only): trainctl imports it to list and
follow runs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from trainer.params import Job
from trainer.runfiles.durations import duration
from trainer.runfiles.keys import run_key
from trainer.runfiles.readers import RunFileError
from trainer.runfiles.timestamps import now_iso
from trainer.storage import Bucket, StorageError

PENDING, RUNNING, SUCCEEDED, FAILED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED"
TERMINAL_STATES = (SUCCEEDED, FAILED)
INTERRUPTED_STAGE = "interrupted"  # the stage after SIGTERM: checkpoint saved (trainer.launchers.interruptions)
QUEUED = "queued"  # the stage of a PENDING local run waiting for cores (trainer.launchers.local.cores); not a resume
# The stages a running trainer's status shows, in run order (trainer.runtime.context.RunContext.stage; the
# fitted ones are trainer.runtime.fitting.STAGES): what a simulated preemption may wait for.
RUN_STAGES = (
    "preparing",
    "base_lm",
    "base_lm_bwd",
    "lm_finetune",
    "lm_finetune_bwd",
    "classifier",
    "classifier_bwd",
    "evaluating",
    "uploading",
)


@dataclass
class RunStatus:
    run_id: str
    lang: str
    env: str
    state: str = PENDING
    stage: str = "pending"
    epoch: int = 0
    epochs: int = 0
    started_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    finished_at: str | None = None
    error: str | None = None
    resumed: int = 0
    host: str | None = None
    pid: int | None = None
    job: str = Job.CLASSIFIER.value  # trainer.params.Job
    # inside a long epoch: {batch, batches, tokens_per_s, eta_s, stage_eta_s} (None between epochs)
    progress: dict | None = None
    # the last epoch's figures, as its log line gives them: {train_loss, valid_loss, macro_f1, ...}
    last_epoch: dict | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def position(self) -> str:
        """`epoch 1/1 · batch 351/4,617 (8%) · 3,420 tokens/s · stage ETA 42m00s`, as far as it is known
        (the epoch running, or without progress the epochs done)."""
        p = self.progress if self.state == RUNNING else None
        if not p:
            return f"epoch {self.epoch}/{self.epochs}" if self.epochs else ""
        return " · ".join(
            [
                f"epoch {p.get('epoch', self.epoch + 1)}/{self.epochs}",
                f"batch {p['batch']:,}/{p['batches']:,} ({100 * p['batch'] / max(p['batches'], 1):.0f}%)",
                f"{p['tokens_per_s']:,} tokens/s",
                f"stage ETA {duration(p['stage_eta_s'])}",
            ]
        )

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "RunStatus":
        data = json.loads(raw)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def read_status(bucket: Bucket, lang: str, run_id: str) -> RunStatus | None:
    """The run's status.json (None while there is none); a damaged one is a RunFileError naming it."""
    key = run_key(lang, run_id, "status.json")
    if not bucket.exists(key):
        return None
    try:
        return RunStatus.from_json(bucket.read_bytes(key))
    except (ValueError, TypeError, AttributeError) as exc:  # truncated, not JSON, or JSON of another shape
        raise RunFileError(bucket.url(key), f"{type(exc).__name__}: {str(exc)[:120]}") from None


def write_status(bucket: Bucket, status: RunStatus) -> None:
    status.updated_at = now_iso()
    bucket.write_bytes(run_key(status.lang, status.run_id, "status.json"), status.to_json())


def mark_failed(bucket: Bucket, lang: str, run_id: str, env: str, error: str) -> RunStatus:
    """Write FAILED with `error` unless the run already ended; returns the final status.

    The write is conditional on the status read: a SUCCEEDED written in between (the trainer finishing
    while the supervisor or the VM agent gives up on it) is never replaced; it is read again instead."""
    key = run_key(lang, run_id, "status.json")
    for _ in range(10):
        found = bucket.read_versioned(key)
        status = RunStatus.from_json(found[0]) if found else None
        if status is not None and status.terminal:
            return status
        if status is None:
            status = RunStatus(run_id=run_id, lang=lang, env=env)
        status.state, status.error, status.finished_at = FAILED, error, now_iso()
        status.updated_at = now_iso()
        if bucket.write_bytes(key, status.to_json(), if_absent=found is None, if_version=found[1] if found else None):
            return status
    raise StorageError("status.json kept changing while the run was marked FAILED", bucket.url(key), transient=True)
