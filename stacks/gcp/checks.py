"""A line of `trainctl doctor`'s report (its own module: doctor and access both make them)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, whether it holds, the detail, what to do."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
