"""One rule for both launchers (local/supervisor.py, vm/agent.py): what counts as an interruption, which
resumes the run under the same id, and how many a run may have before it ends FAILED.

An interruption leaves a checkpoint and no final status: the trainer stopped on SIGTERM (its stage is
"interrupted"), or its process was lost (a signal, a peer rank gone) without recording an end. A data or
code failure records FAILED, or exits 1/2 alone, and is never resumed. Stdlib only."""

from __future__ import annotations

from trainer.errors import TrainerExit
from trainer.runfiles.status_file import INTERRUPTED_STAGE, RunStatus


def checkpointed(status: RunStatus | None) -> bool:
    """The trainer stopped on SIGTERM with a checkpoint saved (status.json says so) and can resume."""
    return status is not None and not status.terminal and status.stage == INTERRUPTED_STAGE


def resumable(code: int, status: RunStatus | None, *, processes: int) -> bool:
    """Would a recreated VM resume this run, judged from the trainer's exit code and status? An interruption,
    not a data or code failure."""
    if status is not None and status.terminal:
        return False  # the trainer (or a rank) recorded how the run ended
    if code in (TrainerExit.SUCCEEDED, TrainerExit.BAD_INPUT):  # without a final status: a bug / bad arguments
        return False
    # One process: 1 is an unhandled error. Under torchrun, 1 is any worker's failure: a rank
    # that failed for real wrote FAILED (above), so what is left is a rank lost to a signal.
    return code != TrainerExit.FAILED or processes > 1


def interruption(status: RunStatus | None, *, seen: int = 0, restarted_on_errors: int = 0) -> int:
    """Which interruption of a run this is. The count is the run's, in status.json: the trainer adds
    one to `resumed` at every resume, whichever node or launcher restarted it, less the resumes that were
    restarts after an error (trainer.launchers.restarts: their own budget). `seen`: the interruptions one
    watcher counted itself, for a trainer killed before it could record its resume."""
    resumed = status.resumed if status is not None else 0
    return max(resumed - restarted_on_errors, seen) + 1


def restarts_exhausted(count: int, max_restarts: int) -> str | None:
    """Why interruption `count` ends the run instead of resuming it (None: resume)."""
    return f"interrupted {count} times; max_restarts={max_restarts} reached" if count > max_restarts else None
