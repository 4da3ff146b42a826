"""What a run's metadata/placements.json (keys.PLACEMENTS_META, written by trainctl) comes to."""

from __future__ import annotations


def placements_summary(journal: dict | None) -> dict:
    """What a run's metadata/placements.json comes to: the zones tried in order, where it ran, preemptions,
    the time spent waiting for capacity and lost to interruptions (zeros for a run without one)."""
    journal = journal or {}
    placed = journal.get("placements") or []
    preemptions = journal.get("preemptions") or []
    return {
        "placements": [p["zone"] for p in placed if p.get("zone")],  # where a zone was chosen
        "ran_in": [p["zone"] for p in placed if p.get("ran") and p.get("zone")],
        "preemptions": len(preemptions),
        "capacity_wait_s": journal.get("capacity_wait_s") or 0.0,
        "interrupted_s": round(sum(p.get("lost_s") or 0.0 for p in preemptions), 1),
    }
