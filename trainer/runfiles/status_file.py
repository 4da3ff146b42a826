"""Run records: where a run's files live in the bucket and what status.json holds.

Light on purpose (stdlib only): trainctl imports it to list and follow runs.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from trainer.params import Job
from trainer.runfiles.metrics_file import RunMetrics
from trainer.storage import Bucket, StorageError

PENDING, RUNNING, SUCCEEDED, FAILED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED"
TERMINAL_STATES = (SUCCEEDED, FAILED)
INTERRUPTED_STAGE = "interrupted"  # the stage after SIGTERM: checkpoint saved (trainer.launchers.interruptions)
QUEUED = "queued"  # the stage of a PENDING local run waiting for cores (trainer.launchers.local.cores); not a resume
ARTIFACTS = ("model.pth", "metrics.json", "valid_predictions.csv")
TFIDF_FILES = ("tfidf.json", "tfidf.npz")  # the TF-IDF part of a kept blend (trainer.classification.blend)
BWD_MODEL = "model_bwd.pth"  # the backward classifier (trainer.bidirectional), loadable like model.pth


TRAINCTL_META = "metadata/trainctl.json"  # written by trainctl at apply: the stack, placement, estimate
PLACEMENTS_META = "metadata/placements.json"  # written by trainctl as the run moves: placements, preemptions, waits


def placements_summary(journal: dict | None) -> dict:
    """What a run's metadata/placements.json comes to: the zones tried in order, where it ran, preemptions,
    the time spent waiting for capacity and lost to interruptions (zeros for a run without one)."""
    journal = journal or {}
    placed = journal.get("placements") or []
    preemptions = journal.get("preemptions") or []
    return {"placements": [p["zone"] for p in placed if p.get("zone")],  # where a zone was chosen
            "ran_in": [p["zone"] for p in placed if p.get("ran") and p.get("zone")],
            "preemptions": len(preemptions), "capacity_wait_s": journal.get("capacity_wait_s") or 0.0,
            "interrupted_s": round(sum(p.get("lost_s") or 0.0 for p in preemptions), 1)}
KEPT_MARK = "UPLOAD_FAILED"  # in a work folder: an artifact did not reach the bucket, so the folder is kept


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def parse_time(ts: str | None) -> datetime | None:
    """A time as run records write it (ISO 8601, or 20261126T113000Z in VM boot records), in UTC; None if unreadable."""
    if not ts:
        return None
    try:
        return datetime.strptime(ts, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(ts)
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def read_json(bucket: Bucket, key: str) -> dict | None:
    """A JSON document of a run folder; None where it is missing or unreadable."""
    try:
        return json.loads(bucket.read_bytes(key)) if bucket.exists(key) else None
    except ValueError:
        return None


def new_run_id() -> str:
    """Sortable by start time, unique enough for humans and machines."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def run_started_at(run_id: str) -> float | None:
    """Epoch seconds of a run id's YYYYMMDD-hhmmss prefix (see new_run_id); None for a hand-made id."""
    try:
        return datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def duration(seconds: float) -> str:
    """3h05m, 12m30s, 45s: an ETA a person reads at a glance."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def run_prefix(lang: str, run_id: str) -> str:
    return f"{lang}/runs/{run_id}/"


def run_key(lang: str, run_id: str, name: str) -> str:
    return run_prefix(lang, run_id) + name


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
    job: str = Job.CLASSIFIER.value  # trainer.jobs.Job
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
        return " · ".join([f"epoch {p.get('epoch', self.epoch + 1)}/{self.epochs}",
                           f"batch {p['batch']:,}/{p['batches']:,} ({100 * p['batch'] / max(p['batches'], 1):.0f}%)",
                           f"{p['tokens_per_s']:,} tokens/s", f"stage ETA {duration(p['stage_eta_s'])}"])

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "RunStatus":
        data = json.loads(raw)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class RunFileError(ValueError):
    """A run file that is there but cannot be read (truncated, not JSON, not a run's): `url` names it."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"{url}: unreadable ({reason})")
        self.url, self.reason = url, reason


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
        if bucket.write_bytes(key, status.to_json(), if_absent=found is None,
                              if_version=found[1] if found else None):
            return status
    raise StorageError("status.json kept changing while the run was marked FAILED", bucket.url(key), transient=True)


def list_run_ids(bucket: Bucket, lang: str) -> list[str]:
    """Run ids of a language, oldest first (ids sort by start time)."""
    prefix = f"{lang}/runs/"
    ids = {key[len(prefix):].split("/", 1)[0] for key in bucket.list(prefix) if key.endswith("/status.json")}
    return sorted(ids)


def scored_predictions(bucket: Bucket, lang: str, run_id: str, metrics: RunMetrics) -> list[dict] | None:
    """The rows of `<split>_predictions.csv` for the split the run's figures come from (None: no file)."""
    import csv
    import io

    key = run_key(lang, run_id, f"{metrics.scored_rows or 'valid'}_predictions.csv")
    if not bucket.exists(key):
        return None
    return list(csv.DictReader(io.StringIO(bucket.read_bytes(key).decode("utf-8"), newline="")))


def read_metrics(bucket: Bucket, lang: str, run_id: str) -> RunMetrics | None:
    """The run's metrics.json, typed (None until the run has written it: it is written last)."""
    key = run_key(lang, run_id, "metrics.json")
    if not bucket.exists(key):
        return None
    try:
        return RunMetrics.from_json(bucket.read_bytes(key))
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise RunFileError(bucket.url(key), f"{type(exc).__name__}: {str(exc)[:120]}") from None
