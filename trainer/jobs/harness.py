"""The run harness: one job (trainer.params.Job) under one status.json, log.txt and exit code.

The job itself is a sequence of stages (trainer/jobs/classifier.py, pretrain_lm.py). Every stage
checkpoints (trainer.runtime.checkpoints); a run started again with the same id (a recreated Spot VM, the
local launcher's restart) resumes from the newest complete checkpoint at the exact batch. Under torchrun
every rank runs this code on its shard of the data; only rank 0 writes to the bucket
(trainer.runtime.distributed).
"""

from __future__ import annotations

import shutil
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from trainer.errors import DataError, RunExistsError, TrainerExit, print_error
from trainer.jobs import classifier, pretrain_lm
from trainer.params import Job
from trainer.runfiles.keys import KEPT_MARK
from trainer.runfiles.status_file import INTERRUPTED_STAGE, QUEUED, SUCCEEDED, RunStatus, mark_failed, read_status
from trainer.runtime import distributed as D
from trainer.runtime import precision as P
from trainer.runtime.context import RunContext
from trainer.runtime.fitting import Fitter
from trainer.runtime.preemption import Interrupted, Preemption
from trainer.runtime.run_data import run_data_bucket
from trainer.runtime.runlog import QuietLog, RunLog
from trainer.storage import StorageError, on_retry, open_bucket

SEQUENCES = {Job.CLASSIFIER: classifier.run, Job.PRETRAIN_LM: pretrain_lm.run}


def _log_for(ctx: D.Context, bucket, args):
    """Rank 0 owns status.json and log.txt; the others only print."""
    if not ctx.main:
        return QuietLog(), False
    status = read_status(bucket, args.lang, args.run_id)
    resume = status is not None and status.stage != QUEUED
    if not resume:
        status = RunStatus(run_id=args.run_id, lang=args.lang, env=args.env, job=args.job)
    else:  # a new value: trainer.launchers.interruptions.interruption counts restarts from it
        status = replace(status, resumed=status.resumed + 1)
    log = RunLog(bucket, status)
    log.started()
    log.line(f"run {args.run_id} ({args.lang}, env {args.env})" + (f", resume #{status.resumed}" if resume else ""))
    return log, resume


@dataclass
class JobRun:
    """One run of a job in this process: what the harness holds so that the run ends the same way (its status,
    log, exit code and scratch folder) whatever stops it."""

    args: object
    ctx: D.Context
    bucket: object
    log: object = field(default_factory=QuietLog)
    rc: RunContext | None = None
    fit: Fitter | None = None
    stop_notes: Callable[[], None] = lambda: None
    preemption: Preemption | None = None  # where a stop says the run resumes from
    interrupted: bool = False  # SIGTERM or a lost peer: the same run id resumes, so the log is not sealed

    def go(self, preemption: Preemption, started: float) -> TrainerExit:
        """The job's stages, then SUCCEEDED (rank 0 writes it)."""
        ctx = self.ctx
        D.init(ctx)
        self.log, _ = _log_for(ctx, self.bucket, self.args)
        if isinstance(self.log, RunLog):
            self.stop_notes = on_retry(self.log.note)  # storage retries in the run log, once each
        # the stages read the run's own copy of its data: a push during the run changes nothing of it
        bucket = run_data_bucket(self.bucket, self.args.lang, self.args.run_id, ctx, self.log)
        self.rc = RunContext.create(self.args, bucket, self.log, ctx, preemption)
        self.log.line(P.describe(self.args.precision, self.rc.precision))
        self.fit = Fitter(self.rc)
        SEQUENCES[Job(self.args.job)](self.rc, self.fit, started)
        if ctx.main:
            self.log.succeeded()
            self.log.line(f"SUCCEEDED in {time.time() - started:.0f}s")
            self.log.flush()
        D.barrier(ctx)  # ranks leave together: one that exits early reads as a failure to torchrun
        return TrainerExit.SUCCEEDED

    def stopped_by(self, exc: Exception) -> TrainerExit:
        """The exit code for what stopped the job, its status written: interrupted runs resume, bad input is the
        user's to fix, anything else failed the run (rank 0's status; another rank records its own error)."""
        ctx, log, args = self.ctx, self.log, self.args
        if isinstance(exc, Interrupted):
            where = self.preemption.stopped_at() if self.preemption is not None else None
            return self._interrupted(
                "interrupted (SIGTERM): checkpoint saved; the same run id resumes from it"
                + (f"\n{where}" if where else ""),
                error=where,
            )
        if isinstance(exc, DataError):
            log.failed(exc.message + (f" ({exc.hint})" if exc.hint else ""))
            return TrainerExit.BAD_INPUT
        if isinstance(exc, StorageError):  # what the storage policy gave up on, said in one line (no traceback)
            if ctx.main and getattr(log, "status", None) is not None and log.status.state == SUCCEEDED:
                # every artifact is uploaded; only the final status write failed: never call that run FAILED
                print(
                    f"run {args.run_id} finished and uploaded its artifacts, but status.json could not be "
                    f"written: {exc}",
                    flush=True,
                )
            elif ctx.main:
                log.failed(f"storage: {exc}")
            else:
                mark_failed(self.bucket, args.lang, args.run_id, args.env, f"rank {ctx.rank}: storage: {exc}")
            return TrainerExit.FAILED
        if D.is_peer_error(exc):
            return self._interrupted(
                f"a peer process stopped ({str(exc).splitlines()[0][:200]}); resuming from the last complete checkpoint"
            )
        traceback.print_exception(exc)
        if ctx.main:
            log.failed(f"{type(exc).__name__}: {exc}")
        else:  # rank 0 would only see a lost peer: record the real error
            mark_failed(self.bucket, args.lang, args.run_id, args.env, f"rank {ctx.rank}: {type(exc).__name__}: {exc}")
        return TrainerExit.FAILED

    def _interrupted(self, why: str, error: str | None = None) -> TrainerExit:
        """error: what status.json says of the stop until the run trains again (`trainctl status` shows it)."""
        self.interrupted = True
        self.log.line(why)
        self.log.update(stage=INTERRUPTED_STAGE, progress=None, error=error)
        return TrainerExit.INTERRUPTED

    def close(self) -> None:
        """Whatever ended the run: the curves' last points, the log's last lines, the processes' group, and the
        scratch folder (kept where an artifact never reached the bucket: its file is all there is)."""
        if self.fit is not None and self.fit.board is not None:
            self.fit.board.close()
        self.stop_notes()
        self.log.close(seal=not self.interrupted)
        D.shutdown(self.ctx)
        rc = self.rc
        if rc is not None and rc.scratch is not None:
            if (rc.work / KEPT_MARK).exists():
                print(f"kept {rc.work}: {(rc.work / KEPT_MARK).read_text().strip()}", flush=True)
            else:
                shutil.rmtree(rc.scratch, ignore_errors=True)


def run_job(args) -> int:
    """Runs `args.job` for `args.run_id` to an exit code (trainer.errors.TrainerExit), its status written."""
    ctx = D.Context.from_env()
    bucket = open_bucket(args.bucket)
    status = read_status(bucket, args.lang, args.run_id)
    if status is not None and status.terminal:
        err = RunExistsError(
            f"run {args.run_id} already ended ({status.state}); its files are kept as they are",
            hint="start a new run id",
        )
        print_error(err.message, err.hint, file=sys.stdout)
        return TrainerExit.BAD_INPUT
    preemption = Preemption(ctx)
    preemption.install()
    run = JobRun(args, ctx, bucket, preemption=preemption)
    try:
        return run.go(preemption, time.time())
    except Exception as exc:  # the run must end with a status, whatever happened
        return run.stopped_by(exc)
    finally:
        run.close()
