"""Errors the trainer raises for bad input (trainctl maps them to exit status 2), the exit codes of
trainer processes, and how any error is printed (the trainer's, trainctl's and the cdktf app's alike)."""

from __future__ import annotations

import enum
import sys

# The shape of every error a person reads, whichever side prints it (trainctl, the cdktf app, a trainer
# process): `error: what is wrong`, then `  → what to do` when there is something to do.
ERROR_MARK, HINT_MARK = "error:", "→"


class DataError(Exception):
    """The labelled data cannot be used; `hint` says how to fix it."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class RunExistsError(DataError):
    """A finished run already owns this run id: never overwrite it."""


class RunIdError(DataError):
    """A run id that cannot name a run (empty, path-like, too long): refused before it reaches the bucket."""


class TrainerExit(enum.IntEnum):
    """How trainer processes end: the launchers (local supervisor, VM agent, startup.sh) act on it."""

    SUCCEEDED = 0
    FAILED = 1  # the run ended FAILED (its status says why)
    BAD_INPUT = 2  # arguments or data refused; never restarted
    AGENT_ERROR = 70  # EX_SOFTWARE: the VM agent itself failed; startup.sh stops the group
    DEADLINE = 124  # max_run_hours passed (timeout(1)'s code)
    INTERRUPTED = 143  # 128 + SIGTERM: checkpoint saved, the launcher resumes the same run id


def error_text(message: str, hint: str | None = None, *, marks: tuple[str, str] = (ERROR_MARK, HINT_MARK)) -> str:
    """An error as the user reads it, on one or two lines; `marks`: ERROR_MARK and HINT_MARK as the caller's
    output shows them (trainctl's console colours them)."""
    return f"{marks[0]} {message}" + (f"\n  {marks[1]} {hint}" if hint else "")


def print_error(message: str, hint: str | None = None, *, file=None) -> None:
    """error_text on `file` (default: stderr), flushed: it is often the process's last word."""
    print(error_text(message, hint), file=sys.stderr if file is None else file, flush=True)
