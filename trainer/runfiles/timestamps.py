"""Times as run files write them (ISO 8601 in UTC), and read back, VM boot records' form too."""

from __future__ import annotations

from datetime import datetime, timezone


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def parse_time(ts: str | None) -> datetime | None:
    """A time as run records write it (ISO 8601, or 20261126T113000Z in VM boot records), in UTC; None if unreadable."""
    if not ts:
        return None
    try:
        return datetime.strptime(ts, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(ts)
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)
