"""Errors the trainer raises for bad input (trainctl maps them to exit status 2), and the exit codes
of trainer processes."""
from __future__ import annotations

import enum


class DataError(Exception):
    """The labelled data cannot be used; `hint` says how to fix it."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class RunExistsError(DataError):
    """A finished run already owns this run id: never overwrite it."""


class TrainerExit(enum.IntEnum):
    """How trainer processes end: the launchers (local supervisor, VM agent, startup.sh) act on it."""

    SUCCEEDED = 0
    FAILED = 1  # the run ended FAILED (its status says why)
    BAD_INPUT = 2  # arguments or data refused; never restarted
    AGENT_ERROR = 70  # EX_SOFTWARE: the VM agent itself failed; startup.sh stops the group
    DEADLINE = 124  # max_run_hours passed (timeout(1)'s code)
    INTERRUPTED = 143  # 128 + SIGTERM: checkpoint saved, the launcher resumes the same run id
