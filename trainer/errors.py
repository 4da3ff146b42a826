"""Errors the trainer raises for bad input; trainctl maps them to exit status 2."""
from __future__ import annotations


class DataError(Exception):
    """The labelled data cannot be used; `hint` says how to fix it."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class RunExistsError(DataError):
    """A finished run already owns this run id: never overwrite it."""
