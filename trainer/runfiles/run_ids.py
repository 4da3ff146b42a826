"""Run ids: `YYYYMMDD-hhmmss-xxxx`, sortable by start time, and the start time read back from one."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone


def new_run_id() -> str:
    """Sortable by start time, unique enough for humans and machines."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def run_started_at(run_id: str) -> float | None:
    """Epoch seconds of a run id's YYYYMMDD-hhmmss prefix (see new_run_id); None for a hand-made id."""
    try:
        return datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
