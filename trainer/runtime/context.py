"""What every stage of a run reads and never changes: its arguments, bucket, log, processes, folders."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from trainer.runfiles.keys import KEPT_MARK, run_key
from trainer.runtime import distributed as D
from trainer.runtime import precision as P
from trainer.runtime.checkpoints import CheckpointStore
from trainer.runtime.preemption import Preemption
from trainer.storage import StorageError, must_land

__all__ = ["RunContext"]


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
        # A scratch folder of our own is removed when the process ends (trainer.jobs.harness.JobRun.close):
        # everything a resume needs is in the bucket, and local runs would otherwise fill /tmp.
        scratch = None if args.work_dir else Path(tempfile.mkdtemp(prefix=f"trainer-{args.lang}-"))
        work = Path(args.work_dir) if args.work_dir else scratch
        if ctx.distributed:
            work = work / f"rank{ctx.rank}"
        (work / "models").mkdir(parents=True, exist_ok=True)
        return cls(
            a=args,
            bucket=bucket,
            log=log,
            ctx=ctx,
            preemption=preemption,
            work=work,
            scratch=scratch,
            store=CheckpointStore(bucket, args.lang, args.run_id, work),
            precision=P.resolve(args.precision),
        )

    @property
    def models(self) -> Path:
        return self.work / "models"

    def put(self, src, name: str, *, optional: bool = False) -> None:
        """Uploads a file (a path) or bytes as `name` in the run's folder.

        A write the run must not lose (trainer.storage.must_land: a transient failure is tried again, the waits
        said in the log, before the run may end); if it never lands, the work folder is kept (KEPT_MARK) and the
        error says where, so a trained model is never thrown away with the run (bytes are written there first).
        An `optional` file (report.html, rendered again by trainctl) fails alone, keeping nothing."""
        key = run_key(self.a.lang, self.a.run_id, name)
        data = bytes(src) if isinstance(src, (bytes, bytearray)) else None
        write = (
            (lambda: self.bucket.write_bytes(key, data))
            if data is not None
            else (lambda: self.bucket.upload(Path(src), key))
        )
        try:
            must_land(write, self.bucket, what=f"upload of {name}", say=self.log.line)
        except StorageError as exc:
            if optional:
                raise
            self._keep(name, data, exc)
            raise StorageError(
                f"{name} not uploaded ({exc.message}); this run's files are kept in {self.work}",
                self.bucket.url(key),
                bad_input=exc.bad_input,
            ) from exc

    def _keep(self, name: str, data: bytes | None, exc: StorageError) -> None:
        """Marks the work folder as holding an artifact the bucket never got (bytes written there first: a file
        put by path is there already)."""
        if data is not None:
            kept = self.work / name
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(data)
        with open(self.work / KEPT_MARK, "a") as mark:
            mark.write(f"{name}: {exc}\n")

    def stage(self, name: str, epochs: int = 0) -> None:
        """Says that stage `name` starts (log.txt and status.json)."""
        self.log.line(f"== stage {name}" + (f" ({epochs} epochs)" if epochs else ""))
        self.log.update(stage=name, epoch=0, epochs=epochs, progress=None)
