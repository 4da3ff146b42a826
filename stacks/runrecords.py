"""Runs as trainctl reads them back: every language's run folders, their state, VMs and cost.

Read-only over the bucket layout of trainer/runs.py (which stays stdlib-only and is not
changed here): `<lang>/runs/<run-id>/status.json`, `metadata/trainctl.json` (written at
apply), `metadata/instances/<vm>/<UTC time>.json` (one per VM boot, written on the VM).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone

from stacks.config import EnvConfig
from trainer.runs import read_metrics, read_status, run_key
from trainer.storage import Bucket

STARTING = "STARTING"  # applied, no status.json yet (the VM or process is still starting)
UNKNOWN = "UNKNOWN"  # no status.json and too old to be starting: it never started
TRAINCTL_META = "metadata/trainctl.json"
COST_META = "metadata/cost.json"


def bucket_languages(bucket: Bucket) -> list[str]:
    """Every language with a `<lang>/runs/` folder in the bucket, configured or not."""
    return [lang for lang in bucket.folders("") if bucket.folders(f"{lang}/runs/")]


def run_ids(bucket: Bucket, lang: str) -> list[str]:
    """Every run folder of a language, oldest first, including runs without a status.json yet."""
    return bucket.folders(f"{lang}/runs/")


def _read_json(bucket: Bucket, key: str) -> dict | None:
    try:
        return json.loads(bucket.read_bytes(key)) if bucket.exists(key) else None
    except ValueError:
        return None


def run_state(bucket: Bucket, lang: str, run_id: str, config: EnvConfig) -> tuple[str, object | None]:
    """(state, RunStatus or None): STARTING for a run applied moments ago without a status yet."""
    from stacks.lifecycle import live_state

    status = read_status(bucket, lang, run_id)
    if status is not None:
        return status.state, status
    from stacks.targets import target_of

    return live_state(bucket, lang, run_id, target_of(config).status_appear_timeout_s) or UNKNOWN, None


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    for fmt in ("%Y%m%dT%H%M%SZ",):
        try:
            return datetime.strptime(ts, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            pass
    try:
        dt = datetime.fromisoformat(ts)
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def boot_records(bucket: Bucket, lang: str, run_id: str) -> list[dict]:
    """The VM boot records of a run (none on the local target)."""
    records = []
    for key in bucket.list(run_key(lang, run_id, "metadata/instances/")):
        if key.endswith(".json") and (rec := _read_json(bucket, key)) is not None:
            rec.setdefault("name", key.rsplit("/", 2)[-2])
            rec.setdefault("booted_at", key.rsplit("/", 1)[-1].removesuffix(".json"))
            records.append(rec)
    return records


def billed_vm_seconds(records: list[dict], end: datetime) -> float:
    """VM time from the boot records: each boot runs until the same VM's next boot (a Spot
    VM recreated after preemption) or the run's end. An estimate: boot and shutdown time count."""
    by_vm: dict[str, list[datetime]] = {}
    for rec in records:
        if (booted := _parse(rec.get("booted_at"))) is not None:
            by_vm.setdefault(str(rec.get("name")), []).append(booted)
    total = 0.0
    for boots in by_vm.values():
        boots.sort()
        for start, nxt in zip(boots, [*boots[1:], None]):
            total += max(((nxt or end) - start).total_seconds(), 0.0)
    return total


def _settings_of(bucket: Bucket, lang: str, run_id: str, config: EnvConfig) -> dict:
    """Machine, GPUs, Spot and nodes of a run: its trainctl.json, else its recorded config, else the env's."""
    meta = _read_json(bucket, run_key(lang, run_id, TRAINCTL_META)) or {}
    if "machine_type" in meta:
        return meta
    recorded = _read_json(bucket, run_key(lang, run_id, "metadata/config.json")) or {}
    s = recorded.get("languages", {}).get(lang) or (config.language(lang).model_dump()
                                                   if lang in config.languages else {})
    zone = meta.get("zone")
    return {**meta, "machine_type": s.get("machine_type"), "gpu": s.get("gpu") or {}, "spot": s.get("spot"),
            "nodes": s.get("nodes", 1), "region": zone.rsplit("-", 1)[0] if zone else config.region}


def run_cost(bucket: Bucket, config: EnvConfig, lang: str, run_id: str, status) -> dict:
    """The run's machines and estimated cost (USD), as its target reckons them (local runs cost 0)."""
    from stacks.targets import target_of

    return target_of(config).run_cost(bucket, config, lang, run_id, status)


def vm_cost(bucket: Bucket, config: EnvConfig, lang: str, run_id: str, status, book_for) -> dict:
    """A VM run's cost: its boot records' billed time at the price `book_for(machine_type)` gives."""
    s = _settings_of(bucket, lang, run_id, config)
    gpu = s.get("gpu") or {}
    records = boot_records(bucket, lang, run_id)
    end = _parse(status.finished_at or status.updated_at) if status else None
    billed = billed_vm_seconds(records, end or datetime.now(timezone.utc))
    per_hour, note, source = (None, "cost unknown: the run records no machine type", None)
    if s.get("machine_type"):
        book = book_for(s["machine_type"])
        source = book.source
        per_hour, note = book.vm_per_hour(s.get("region"), s["machine_type"], gpu.get("type"),
                                          gpu.get("count") or 0, bool(s.get("spot")))
    return {"machine_type": s.get("machine_type"), "gpu_type": gpu.get("type"), "gpu_count": gpu.get("count") or 0,
            "spot": s.get("spot"), "nodes": s.get("nodes", 1), "vm_boots": len(records), "billed_vm_s": round(billed),
            "vm_per_hour": per_hour, "est_cost": None if per_hour is None else round(billed / 3600 * per_hour, 4),
            "cost_note": note, "prices_source": source}


def duration_s(status) -> float | None:
    if status is None or not status.started_at:
        return None
    end = _parse(status.finished_at or status.updated_at)
    start = _parse(status.started_at)
    return (end - start).total_seconds() if end and start else None


def run_row(bucket: Bucket, config: EnvConfig, lang: str, run_id: str) -> dict:
    """One run as `trainctl runs --json` prints it (keys documented in the README)."""
    state, status = run_state(bucket, lang, run_id, config)
    metrics = read_metrics(bucket, lang, run_id)
    return {"run_id": run_id, "lang": lang, "configured": lang in config.languages, "state": state,
            "stage": status.stage if status else None, "started_at": status.started_at if status else None,
            "finished_at": status.finished_at if status else None, "duration_s": duration_s(status),
            "macro_f1": metrics.macro_f1 if metrics else None,
            "tfidf_macro_f1": metrics.tfidf_macro_f1 if metrics else None,
            "kept": metrics.kept if metrics and metrics.model is not None else None,
            "scored_rows": metrics.scored_rows if metrics else None,
            "resumed": status.resumed if status else 0,
            "error": status.error if status else None, "url": bucket.url(f"{lang}/runs/{run_id}"),
            **run_cost(bucket, config, lang, run_id, status)}


def record_cost(bucket: Bucket, config: EnvConfig, lang: str, run_id: str) -> dict:
    """Write metadata/cost.json (billed VM time and the estimate) once a run has ended."""
    cost = run_cost(bucket, config, lang, run_id, read_status(bucket, lang, run_id))
    bucket.write_bytes(run_key(lang, run_id, COST_META), json.dumps(cost, indent=2).encode())
    return cost
