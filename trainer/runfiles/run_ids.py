"""Run ids: `YYYYMMDD-hhmmss-xxxx`, sortable by start time, the start time read back from one, and the one
check of an id given by a person or a launcher (check_run_id)."""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone

from trainer.errors import RunIdError

# A run id is a folder name in the bucket and a label on a VM: letters, digits, - and _, first a letter or
# digit (no `.`, `/` or `\`, so never a path), at most 63 characters (a Compute Engine label's length).
RUN_ID_FORM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
RUN_ID_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
RUN_ID_EXAMPLE = "20260101-100000-abcd"


def new_run_id() -> str:
    """Sortable by start time, unique enough for humans and machines."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def run_started_at(run_id: str) -> float | None:
    """Epoch seconds of a run id's YYYYMMDD-hhmmss prefix (see new_run_id); None for a hand-made id."""
    try:
        return datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def run_id_problem(run_id: str) -> str | None:
    """Why `run_id` cannot name a run (one line, the id quoted and cut short), or None."""
    if not run_id:
        return "the run id is empty"
    if RUN_ID_FORM.fullmatch(run_id):
        return None
    shown = repr(run_id[:60]) + ("…" if len(run_id) > 60 else "")
    if RUN_ID_CHARS.fullmatch(run_id):
        return f"run id {shown} is {len(run_id)} characters long (at most 63)"
    return f"{shown} is not a run id (letters, digits, - and _ only, like {RUN_ID_EXAMPLE}; never a path)"


def check_run_id(run_id: str, *, hint: str = "copy the id from `trainctl runs`") -> str:
    """`run_id` as given, or RunIdError: every command that takes a run id, and the trainer, check it here."""
    if problem := run_id_problem(run_id):
        raise RunIdError(problem, hint=hint)
    return run_id
