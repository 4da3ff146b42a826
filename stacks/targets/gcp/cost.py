"""What a gcp run cost: its VMs' boot records (written on each VM at boot) priced by the env's price book."""

from __future__ import annotations

from datetime import datetime, timezone

from stacks.config import EnvConfig
from stacks.targets.gcp.prices import rung_per_hour
from trainer.runfiles.keys import PLACEMENTS_META, TRAINCTL_META, run_key
from trainer.runfiles.readers import read_json
from trainer.runfiles.timestamps import parse_time
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


def billed_vm_seconds(records: list[dict], end: datetime, placements: list[dict] | None = None) -> dict[str, float]:
    """VM time per region from the boot records (billed_vm_spans, every rung together)."""
    totals: dict[str, float] = {}
    for (region, _rung), seconds in billed_vm_spans(records, end, placements).items():
        totals[region] = totals.get(region, 0.0) + seconds
    return totals


def placement_rung(placement: dict) -> str | None:
    """The capacity rung a placements.json record ran at: its `rung`, else its `spot` (older records), else None."""
    if placement.get("rung"):
        return placement["rung"]
    spot = placement.get("spot")
    return None if spot is None else ("spot" if spot else "on_demand")


def billed_vm_spans(
    records: list[dict], end: datetime, placements: list[dict] | None = None, preemptions: list[dict] | None = None
) -> dict[tuple[str | None, str | None], float]:
    """VM time per (region, capacity rung) from the boot records: each boot runs until its preemption was seen (a
    preempted Spot VM is deleted, instance_termination_action DELETE, and billed no more while its group waits for
    capacity: https://cloud.google.com/compute/docs/instances/spot), the same VM's next boot, the end of the
    placement it booted in (the run moved: that group was destroyed; metadata/placements.json), or the run's end;
    it ran at the rung (spot, flex_start, on_demand) that placement took (the capacity ladder changes it mid-run),
    None where no placement says. `preemptions` (placements.json's, of a single-node run: its one VM was the one
    preempted). An estimate: boot and shutdown time count."""
    by_vm: dict[str, list[tuple[datetime, str | None]]] = {}
    for rec in records:
        if (booted := parse_time(rec.get("booted_at"))) is not None:
            by_vm.setdefault(str(rec.get("name")), []).append((booted, rec.get("zone")))
    spans = [
        (p.get("zone"), parse_time(p.get("applied_at")), parse_time(p.get("ended_at")), placement_rung(p))
        for p in placements or []
    ]
    preempted = [(p.get("zone"), parse_time(p.get("detected_at"))) for p in preemptions or []]
    totals: dict[tuple[str | None, str | None], float] = {}
    for boots in by_vm.values():
        boots.sort(key=lambda b: b[0])
        for (start, zone), nxt in zip(boots, [*(b[0] for b in boots[1:]), None]):
            stop, rung = min(nxt or end, end), None
            stop = min([stop, *(at for z, at in preempted if z == zone and at and start < at)])
            for placed_zone, applied, ended, placed_rung in spans:
                if placed_zone == zone and applied and applied <= start and (ended is None or start < ended):
                    rung = placed_rung
                    stop = min(stop, ended) if ended else stop
            key = (zone.rsplit("-", 1)[0] if zone else None, rung)
            totals[key] = totals.get(key, 0.0) + max((stop - start).total_seconds(), 0.0)
    return totals


def settings_of(bucket: Bucket, lang: str, run_id: str, config: EnvConfig) -> dict:
    """Machine, GPUs, Spot, rung and nodes of a run: its trainctl.json, else its recorded config, else the env's."""
    meta = read_json(bucket, run_key(lang, run_id, TRAINCTL_META)) or {}
    if "machine_type" in meta:
        return meta
    recorded = read_json(bucket, run_key(lang, run_id, "metadata/config.json")) or {}
    s = recorded.get("languages", {}).get(lang) or (
        config.language(lang).model_dump() if lang in config.languages else {}
    )
    vm = s.get("gcp") or s  # a config from before the `gcp:` block of a language has its keys at the top
    zone = meta.get("zone")
    return {
        **meta,
        "machine_type": vm.get("machine_type"),
        "gpu": vm.get("gpu") or {},
        "spot": s.get("spot"),
        "rung": (s.get("capacity") or [None])[0],
        "nodes": s.get("nodes", 1),
        "region": zone.rsplit("-", 1)[0] if zone else config.gcp.region,
    }


def vm_cost(bucket: Bucket, config: EnvConfig, lang: str, run_id: str, status, book_for) -> dict:
    """A VM run's cost: its boot records' billed time at the price `book_for(machine_type)` gives."""
    s = settings_of(bucket, lang, run_id, config)
    gpu = s.get("gpu") or {}
    records = boot_records(bucket, lang, run_id)
    end = parse_time(status.finished_at or status.updated_at) if status else None
    journal = read_json(bucket, run_key(lang, run_id, PLACEMENTS_META)) or {}
    # a multi-node run's preemption names no VM: only a single-node run's boots end at its preemptions
    preemptions = journal.get("preemptions") if s.get("nodes", 1) == 1 else None
    spans = billed_vm_spans(records, end or datetime.now(timezone.utc), journal.get("placements"), preemptions)
    billed = sum(spans.values())
    per_hour, note, source, cost = (None, "cost unknown: the run records no machine type", None, None)
    if s.get("machine_type"):
        book = book_for(s["machine_type"])
        source, cost = book.source, 0.0
        # a moved run: each VM at its own region's price, at the rung its placement took
        recorded = s.get("rung") or ("spot" if s.get("spot") else "on_demand")
        for region, rung in spans or {(s.get("region"), None): 0.0}:
            rate, note = rung_per_hour(
                book,
                region or s.get("region"),
                s["machine_type"],
                gpu.get("type"),
                gpu.get("count") or 0,
                rung or recorded,
            )
            per_hour = rate if per_hour is None else per_hour
            cost = None if rate is None or cost is None else cost + spans.get((region, rung), 0.0) / 3600 * rate
    return {
        "machine_type": s.get("machine_type"),
        "gpu_type": gpu.get("type"),
        "gpu_count": gpu.get("count") or 0,
        "spot": s.get("spot"),
        "rung": s.get("rung") or ("spot" if s.get("spot") else "on_demand"),
        "nodes": s.get("nodes", 1),
        "vm_boots": len(records),
        "billed_vm_s": round(billed),
        "vm_per_hour": per_hour,
        "est_cost": None if cost is None else round(cost, 4),
        "cost_note": note,
        "prices_source": source,
    }
