"""What every stage of a run reads and never changes: its arguments, bucket, log, processes, folders."""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trainer.runtime import distributed as D
from trainer.runtime import precision as P
from trainer.runtime.preemption import Preemption
from trainer.runtime.checkpoints import CheckpointStore
from trainer.runfiles.status_file import KEPT_MARK, run_key
from trainer.storage import StorageError

UPLOAD_ROUNDS = 3  # an artifact's upload, each round under the storage policy's own retries
__all__ = ["KEPT_MARK", "RunContext", "UPLOAD_ROUNDS"]


@dataclass(frozen=True)
class RunContext:
    """One run's fixed surroundings (frozen: a stage's results are returned, never set on it)."""

    a: object  # the parsed trainer arguments (trainer.cli / trainer.params)
    bucket: object  # trainer.storage.Bucket
    log: object  # trainer.runtime.runlog.RunLog, or QuietLog on ranks > 0
    ctx: D.Context
    preemption: Preemption
    work: Path  # this rank's scratch folder (models/ inside)
    scratch: Path | None  # removed when the process ends (None: the user's --work-dir, kept)
    store: CheckpointStore
    precision: str

    @classmethod
    def create(cls, args, bucket, log, ctx: D.Context, preemption: Preemption) -> "RunContext":
        # A scratch folder of our own is removed when the process ends (trainer.jobs.harness.run_job):
        # everything a resume needs is in the bucket, and local runs would otherwise fill /tmp.
        scratch = None if args.work_dir else Path(tempfile.mkdtemp(prefix=f"trainer-{args.lang}-"))
        work = Path(args.work_dir) if args.work_dir else scratch
        if ctx.distributed:
            work = work / f"rank{ctx.rank}"
        (work / "models").mkdir(parents=True, exist_ok=True)
        return cls(a=args, bucket=bucket, log=log, ctx=ctx, preemption=preemption, work=work, scratch=scratch,
                   store=CheckpointStore(bucket, args.lang, args.run_id, work), precision=P.resolve(args.precision))

    @property
    def models(self) -> Path:
        return self.work / "models"

    def put(self, src, name: str, *, optional: bool = False) -> None:
        """Uploads a file (a path) or bytes as `name` in the run's folder.

        A transient failure the storage policy gave up on is tried again (UPLOAD_ROUNDS rounds, waiting
        longer each time) before the run may end; if it never lands, the work folder is kept (KEPT_MARK)
        and the error says where, so a trained model is never thrown away with the run (bytes are written there
        first). An `optional` file (report.html, rendered again by trainctl) fails alone, keeping nothing."""
        key = run_key(self.a.lang, self.a.run_id, name)
        policy = getattr(self.bucket, "policy", None)
        for attempt in range(1, UPLOAD_ROUNDS + 1):
            try:
                if isinstance(src, (bytes, bytearray)):
                    self.bucket.write_bytes(key, bytes(src))
                else:
                    self.bucket.upload(Path(src), key)
                return
            except StorageError as exc:
                if not exc.transient or attempt == UPLOAD_ROUNDS:
                    if optional:
                        raise
                    if isinstance(src, (bytes, bytearray)):
                        kept = self.work / name
                        kept.parent.mkdir(parents=True, exist_ok=True)
                        kept.write_bytes(bytes(src))
                    with open(self.work / KEPT_MARK, "a") as mark:
                        mark.write(f"{name}: {exc}\n")
                    raise StorageError(f"{name} not uploaded ({exc.message}); this run's files are kept in "
                                       f"{self.work}", self.bucket.url(key), bad_input=exc.bad_input) from exc
                wait = 10.0 * attempt * (policy.backoff_s if policy else 1.0)
                self.log.line(f"upload of {name} failed ({exc.message}); trying again in {wait:.0f} s "
                              f"(round {attempt + 1} of {UPLOAD_ROUNDS})")
                time.sleep(wait)

    def stage(self, name: str, epochs: int = 0) -> None:
        """Says that stage `name` starts (log.txt and status.json)."""
        self.log.line(f"== stage {name}" + (f" ({epochs} epochs)" if epochs else ""))
        self.log.update(stage=name, epoch=0, epochs=epochs, progress=None)
