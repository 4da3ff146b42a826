"""A duration as a person reads it in a status line or an ETA (3h05m, 12m30s, 45s)."""

from __future__ import annotations


def duration(seconds: float) -> str:
    """3h05m, 12m30s, 45s: an ETA a person reads at a glance."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"
