"""What a training stack's plan says about its GPUs, zone and the cost of one run.

Read from the planned instance template and group (any plan JSON carries them), never from
the live configuration, so a saved plan renders the same anywhere. Priced by the quote
`trainctl plan` stored with the plan (its price book: the Cloud Billing Catalog on gcp), else
by the fallback price table (stacks/targets/gcp/prices.py); the line names which.
"""

from __future__ import annotations

from dataclasses import dataclass

TEMPLATE = "google_compute_instance_template"
GROUP = "google_compute_instance_group_manager"


@dataclass(frozen=True)
class TrainingFacts:
    machine_type: str
    gpu_type: str | None
    gpu_count: int
    nodes: int
    zone: str | None
    spot: bool
    max_run_hours: float | None
    flex_start: bool = False  # the planned template's provisioning_model is FLEX_START

    @property
    def region(self) -> str | None:
        return self.zone.rsplit("-", 1)[0] if self.zone else None


def _values(plan, kind: str) -> dict | None:
    for change in plan.changes:
        if change.type == kind:
            values = change.after if change.kind != "delete" else change.before
            if isinstance(values, dict):
                return values
    return None


def _first(block) -> dict:
    return block[0] if isinstance(block, list) and block and isinstance(block[0], dict) else {}


def training_facts(plan) -> TrainingFacts | None:
    """None for stacks without an instance template (foundation, local training stacks)."""
    template = _values(plan, TEMPLATE)
    if template is None or not (plan.stack.startswith("train-") or template.get("guest_accelerator")):
        return None
    group = _values(plan, GROUP) or {}
    metadata = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    gpu = _first(template.get("guest_accelerator"))
    scheduling = _first(template.get("scheduling"))
    node_configs = sum(1 for c in plan.changes if c.type == "google_compute_per_instance_config" and c.kind != "delete")
    try:
        nodes = int(metadata.get("trainstack-nodes") or node_configs or group.get("target_size") or 1)
    except (TypeError, ValueError):
        nodes = 1
    try:
        hours = float(metadata["trainstack-max-run-hours"])
    except (KeyError, TypeError, ValueError):
        hours = None
    return TrainingFacts(
        machine_type=str(template.get("machine_type") or "?"),
        gpu_type=gpu.get("type"),
        gpu_count=int(gpu.get("count") or 0),
        nodes=nodes,
        zone=group.get("zone") or metadata.get("trainstack-zone"),
        spot=scheduling.get("provisioning_model") == "SPOT" or bool(scheduling.get("preemptible")),
        max_run_hours=hours,
        flex_start=scheduling.get("provisioning_model") == "FLEX_START",
    )


RUNGS = (("spot", "Spot"), ("flex_start", "flex-start"), ("on_demand", "on-demand"))


def planned_rung(facts: TrainingFacts) -> str:
    return "flex_start" if facts.flex_start else "spot" if facts.spot else "on_demand"


def quote(facts: TrainingFacts, book) -> dict:
    """Spot and on-demand price of one VM from a price book (and flex-start's where the plan is at that rung), and
    the book's source (stored with a plan)."""
    from stacks.targets.gcp.prices import rung_per_hour

    out: dict = {"source": book.source, "warning": book.warning}
    for rung, _ in RUNGS:
        if rung == "flex_start" and not facts.flex_start:
            continue
        vm, note = rung_per_hour(book, facts.region, facts.machine_type, facts.gpu_type, facts.gpu_count, rung)
        out[rung] = {"vm_per_hour": vm, "note": note}
    return out


def cost_line(facts: TrainingFacts, prices: dict | None = None) -> str:
    """What runs where, and the Spot and on-demand cost of one run at its max_run_hours."""
    if prices is None:
        from stacks.targets.gcp.prices import fallback_book

        prices = quote(facts, fallback_book())
    gpus = f"{facts.gpu_count} x {facts.gpu_type}" if facts.gpu_type and facts.gpu_count else "no GPU"
    what = f"{facts.nodes} x {facts.machine_type} with {gpus} each, zone {facts.zone or 'unknown'}"
    if facts.max_run_hours is None:
        return f"{what}; cost unknown: the plan carries no max_run_hours"
    figures = []
    for key, label in RUNGS:
        if key == "flex_start" and key not in prices:
            continue
        entry = prices.get(key) or {}
        vm = entry.get("vm_per_hour")
        if vm is None:
            figures.append(f"{label}: {entry.get('note') or 'cost unknown'}")
        else:
            mark = " (planned)" if key == planned_rung(facts) else ""
            figures.append(f"{label}{mark} ${vm * facts.nodes * facts.max_run_hours:,.2f}")
    warning = f"; {prices['warning']}" if prices.get("warning") else ""
    return (
        f"{what}; one run of at most {facts.max_run_hours:g} h: {', '.join(figures)} "
        f"(list prices: {prices.get('source') or 'unknown source'}{warning}; estimate)"
    )
