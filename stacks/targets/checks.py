"""A line of `trainctl doctor`'s report: what each target's doctor returns (gcp: stacks.targets.gcp.doctor,
local: stacks.targets.local.target)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, whether it holds, the detail, what to do."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
