"""The run harness: one job (trainer.jobs.Job) under one status.json, log.txt and exit code.

The job itself is a sequence of stages (trainer/jobs/classifier.py, pretrain_lm.py). Every stage
checkpoints (trainer.runtime.checkpoints); a run started again with the same id (a recreated Spot VM, the
local launcher's restart) resumes from the newest complete checkpoint at the exact batch. Under torchrun
every rank runs this code on its shard of the data; only rank 0 writes to the bucket
(trainer.runtime.distributed).
"""
from __future__ import annotations

import shutil
import time
import traceback
from dataclasses import replace

from trainer.errors import DataError, RunExistsError, TrainerExit
from trainer.jobs import classifier, pretrain_lm
from trainer.params import Job
from trainer.runfiles.status_file import INTERRUPTED_STAGE, QUEUED, SUCCEEDED, RunStatus, mark_failed, read_status
from trainer.runtime import distributed as D
from trainer.runtime import precision as P
from trainer.runtime.context import KEPT_MARK, RunContext
from trainer.runtime.fitting import Fitter
from trainer.runtime.preemption import Interrupted, Preemption
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


def run_job(args) -> int:
    """Runs `args.job` for `args.run_id` to an exit code (trainer.errors.TrainerExit), its status written."""
    ctx = D.Context.from_env()
    bucket = open_bucket(args.bucket)
    status = read_status(bucket, args.lang, args.run_id)
    if status is not None and status.terminal:
        err = RunExistsError(f"run {args.run_id} already ended ({status.state}); its files are kept as they are",
                             hint="start a new run id")
        print(f"error: {err.message}\n  {err.hint}", flush=True)
        return TrainerExit.BAD_INPUT
    preemption = Preemption(ctx)
    preemption.install()
    started = time.time()
    log, rc, fit, stop_notes, interrupted = QuietLog(), None, None, lambda: None, False
    try:
        D.init(ctx)
        log, _ = _log_for(ctx, bucket, args)
        if isinstance(log, RunLog):
            stop_notes = on_retry(log.note)  # storage retries in the run log, once each
        rc = RunContext.create(args, bucket, log, ctx, preemption)
        log.line(P.describe(args.precision, rc.precision))
        fit = Fitter(rc)
        SEQUENCES[Job(args.job)](rc, fit, started)
        if ctx.main:
            log.succeeded()
            log.line(f"SUCCEEDED in {time.time() - started:.0f}s")
            log.flush()
        D.barrier(ctx)  # ranks leave together: one that exits early reads as a failure to torchrun
        return TrainerExit.SUCCEEDED
    except Interrupted:
        interrupted = True
        log.line("interrupted (SIGTERM): checkpoint saved; the same run id resumes from it")
        log.update(stage=INTERRUPTED_STAGE, progress=None)
        return TrainerExit.INTERRUPTED
    except DataError as exc:
        log.failed(exc.message + (f" ({exc.hint})" if exc.hint else ""))
        return TrainerExit.BAD_INPUT
    except StorageError as exc:  # what the storage policy gave up on, said in one line (no traceback)
        if ctx.main and getattr(log, "status", None) is not None and log.status.state == SUCCEEDED:
            # every artifact is uploaded; only the final status write failed: never call that run FAILED
            print(f"run {args.run_id} finished and uploaded its artifacts, but status.json could not be "
                  f"written: {exc}", flush=True)
        elif ctx.main:
            log.failed(f"storage: {exc}")
        else:
            mark_failed(bucket, args.lang, args.run_id, args.env, f"rank {ctx.rank}: storage: {exc}")
        return TrainerExit.FAILED
    except Exception as exc:  # the run must end with a status, whatever happened
        if D.is_peer_error(exc):
            interrupted = True
            log.line(f"a peer process stopped ({str(exc).splitlines()[0][:200]}); "
                     "resuming from the last complete checkpoint")
            log.update(stage=INTERRUPTED_STAGE, progress=None)
            return TrainerExit.INTERRUPTED
        traceback.print_exc()
        if ctx.main:
            log.failed(f"{type(exc).__name__}: {exc}")
        else:  # rank 0 would only see a lost peer: record the real error
            mark_failed(bucket, args.lang, args.run_id, args.env, f"rank {ctx.rank}: {type(exc).__name__}: {exc}")
        return TrainerExit.FAILED
    finally:
        if fit is not None and fit.board is not None:
            fit.board.close()  # the curves' last points, whatever ended the run
        stop_notes()
        log.close(seal=not interrupted)
        D.shutdown(ctx)
        if rc is not None and rc.scratch is not None:
            if (rc.work / KEPT_MARK).exists():  # an artifact never reached the bucket: its file is all there is
                print(f"kept {rc.work}: {(rc.work / KEPT_MARK).read_text().strip()}", flush=True)
            else:
                shutil.rmtree(rc.scratch, ignore_errors=True)
