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


def read_restarts(bucket: Bucket, lang: str, run_id: str) -> list[dict]:
    """The run's restart records, oldest first (none: an empty list)."""
    doc = read_json(bucket, run_key(lang, run_id, RESTARTS_META)) or {}
    records = doc.get("restarts") if isinstance(doc, dict) else None
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def append_restart(bucket: Bucket, lang: str, run_id: str, record: dict) -> dict:
    """Adds `record` as the run's next restart (its number and time filled in) and returns it."""
    records = read_restarts(bucket, lang, run_id)
    record = {"restart": len(records) + 1, "at": now_iso(), **record}
    body = json.dumps({"restarts": [*records, record]}, indent=2).encode()
    bucket.write_bytes(run_key(lang, run_id, RESTARTS_META), body)
    return record


def restart_place(record: dict) -> str:
    """Where a restart happened, as its record says: `launcher vm node 0 zone europe-west4-a`."""
    return " ".join(f"{k} {record[k]}" for k in ("launcher", "node", "zone") if record.get(k) is not None)
