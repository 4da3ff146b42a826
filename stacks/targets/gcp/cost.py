"""What a gcp run cost: its VMs' boot records (written on each VM at boot) priced by the env's price book."""
from __future__ import annotations

from datetime import datetime, timezone

from stacks.config import EnvConfig
from trainer.runfiles.status_file import TRAINCTL_META, parse_time, read_json, run_key
from trainer.storage import Bucket


def boot_records(bucket: Bucket, lang: str, run_id: str) -> list[dict]:
    """The VM boot records of a run (none on the local target)."""
    records = []
    for key in bucket.list(run_key(lang, run_id, "metadata/instances/")):
        if key.endswith(".json") and (rec := read_json(bucket, key)) is not None:
            rec.setdefault("name", key.rsplit("/", 2)[-2])
            rec.setdefault("booted_at", key.rsplit("/", 1)[-1].removesuffix(".json"))
            records.append(rec)
    return records


def billed_vm_seconds(records: list[dict], end: datetime) -> float:
    """VM time from the boot records: each boot runs until the same VM's next boot (a Spot
    VM recreated after preemption) or the run's end. An estimate: boot and shutdown time count."""
    by_vm: dict[str, list[datetime]] = {}
    for rec in records:
        if (booted := parse_time(rec.get("booted_at"))) is not None:
            by_vm.setdefault(str(rec.get("name")), []).append(booted)
    total = 0.0
    for boots in by_vm.values():
        boots.sort()
        for start, nxt in zip(boots, [*boots[1:], None]):
            total += max(((nxt or end) - start).total_seconds(), 0.0)
    return total


def settings_of(bucket: Bucket, lang: str, run_id: str, config: EnvConfig) -> dict:
    """Machine, GPUs, Spot and nodes of a run: its trainctl.json, else its recorded config, else the env's."""
    meta = read_json(bucket, run_key(lang, run_id, TRAINCTL_META)) or {}
    if "machine_type" in meta:
        return meta
    recorded = read_json(bucket, run_key(lang, run_id, "metadata/config.json")) or {}
    s = recorded.get("languages", {}).get(lang) or (config.language(lang).model_dump()
                                                   if lang in config.languages else {})
    zone = meta.get("zone")
    return {**meta, "machine_type": s.get("machine_type"), "gpu": s.get("gpu") or {}, "spot": s.get("spot"),
            "nodes": s.get("nodes", 1), "region": zone.rsplit("-", 1)[0] if zone else config.region}


def vm_cost(bucket: Bucket, config: EnvConfig, lang: str, run_id: str, status, book_for) -> dict:
    """A VM run's cost: its boot records' billed time at the price `book_for(machine_type)` gives."""
    s = settings_of(bucket, lang, run_id, config)
    gpu = s.get("gpu") or {}
    records = boot_records(bucket, lang, run_id)
    end = parse_time(status.finished_at or status.updated_at) if status else None
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
