"""A run's metadata/restarts.json (keys.RESTARTS_META): one record per restart after a failure that was not the
code's (trainer.launchers.restarts decides), written by the launcher that restarted the trainer and read by the
operator side (`trainctl runs`, report.html, the tracker). The list is the run's count: a recreated VM, another
node or a resumed run reads it, so none starts the count again."""

from __future__ import annotations

import json

from trainer.runfiles.keys import RESTARTS_META, run_key
from trainer.runfiles.readers import read_json
from trainer.runfiles.timestamps import now_iso
from trainer.storage import Bucket

CONDITIONAL_TRIES = 10  # reads and conditional writes of restarts.json before a plain write


def read_restarts(bucket: Bucket, lang: str, run_id: str) -> list[dict]:
    """The run's restart records, oldest first (none: an empty list)."""
    doc = read_json(bucket, run_key(lang, run_id, RESTARTS_META)) or {}
    return _records(doc)


def _records(doc) -> list[dict]:
    records = doc.get("restarts") if isinstance(doc, dict) else None
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def append_restart(
    bucket: Bucket, lang: str, run_id: str, record: dict, *, event: str | None = None
) -> tuple[dict, bool]:
    """Adds `record` as the run's next restart (its number and time filled in) -> (it, True). `event`: what names
    the failure run-wide, where every node of a multi-node run meets it and asks to restart: a record of the same
    event already there is returned instead (it, False), so the run counts the failure once. Written conditionally
    on the version read: two nodes writing at once neither lose a record nor add one twice; a store that never
    matches the version read is written plainly after CONDITIONAL_TRIES (at worst a record twice, never a hang)."""
    key = run_key(lang, run_id, RESTARTS_META)
    for attempt in range(1, CONDITIONAL_TRIES + 1):
        found = bucket.read_versioned(key)
        try:
            records = _records(json.loads(found[0])) if found else []
        except ValueError:  # unreadable: the count starts again rather than the run stopping on its bookkeeping
            records = []
        same = next((r for r in records if event is not None and r.get("event") == event), None)
        if same is not None:
            return same, False
        new = {"restart": len(records) + 1, "at": now_iso(), **record, **({"event": event} if event else {})}
        body = json.dumps({"restarts": [*records, new]}, indent=2).encode()
        if attempt == CONDITIONAL_TRIES:
            bucket.write_bytes(key, body)
            return new, True
        if bucket.write_bytes(key, body, if_absent=found is None, if_version=found[1] if found else None):
            return new, True
    raise AssertionError("unreachable")


def restart_place(record: dict) -> str:
    """Where a restart happened, as its record says: `launcher vm node 0 zone europe-west4-a`."""
    return " ".join(f"{k} {record[k]}" for k in ("launcher", "node", "zone") if record.get(k) is not None)
