"""What a simulated VM draws on, and whether a quota has room for it.

A VM is refused with QUOTA_EXCEEDED "Quota 'METRIC' exceeded.  Limit: N in region R." (the recorded
tests/fixtures/compute/list_errors_quota_exceeded.json) when one of the quotas it draws on has no room. Spot
and flex-start VMs draw on the preemptible quotas (PREEMPTIBLE_CPUS, PREEMPTIBLE_NVIDIA_*_GPUS) where the region
grants any, else on the standard ones (flex-start: https://cloud.google.com/compute/docs/instances/about-flex-start-vms);
a series with its own CPU quota (G2_CPUS, A2_CPUS, ...) draws on it instead
of CPUS; pd-balanced/pd-ssd boot disks on SSD_TOTAL_GB, pd-standard on DISKS_TOTAL_GB; every GPU on
GPUS_ALL_REGIONS (https://cloud.google.com/compute/resource-usage, "Preemptible quota" and "GPU quota";
https://cloud.google.com/compute/docs/instances/create-use-spot, "Before you begin"). H100/H200 count against
the region's GPU family quota (https://cloud.google.com/docs/quotas/implement-common-use-cases). Usage is what
outside VMs use (the scenario) plus the sim's VMs from creation until they stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from stacks.targets.gcp.sim.scenario import Quota, Scenario, region_of

LIVE = ("PROVISIONING", "STAGING", "RUNNING", "STOPPING")  # states that hold CPUs, GPUs and disks


@dataclass(frozen=True)
class VmShape:
    """What a VM of a template draws on: machine, GPUs, provisioning model, boot disk, its metadata."""

    machine_type: str
    accelerators: dict[str, int]  # the template's guestAccelerators (G2/A2/A3: what the type bundles)
    spot: bool
    disk_gb: int
    disk_type: str
    metadata: dict[str, str]
    delete_on_preemption: bool = False  # scheduling.instanceTerminationAction DELETE (else the VM stops)
    nic_types: tuple[str, ...] = ()  # each network interface's nicType ("" where unset: VirtIO-Net)
    provisioning_model: str = "STANDARD"  # scheduling.provisioningModel: STANDARD, SPOT or FLEX_START
    max_run_s: float | None = None  # scheduling.maxRunDuration: the VM is deleted that long after it starts running

    @property
    def flex_start(self) -> bool:
        return self.provisioning_model == "FLEX_START"

    @classmethod
    def from_template(cls, template: dict) -> "VmShape":
        props = template.get("properties") or {}
        scheduling = props.get("scheduling") or {}
        disk = next((d for d in props.get("disks") or [] if d.get("boot")), {}) or {}
        params = disk.get("initializeParams") or {}
        return cls(
            machine_type=props.get("machineType", "").rsplit("/", 1)[-1],
            accelerators={
                a.get("acceleratorType", "").rsplit("/", 1)[-1]: int(a.get("acceleratorCount") or 0)
                for a in props.get("guestAccelerators") or []
            },
            spot=scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible")),
            disk_gb=int(params.get("diskSizeGb") or 10),
            disk_type=(params.get("diskType") or "pd-standard").rsplit("/", 1)[-1],
            metadata={i["key"]: i.get("value", "") for i in (props.get("metadata") or {}).get("items") or []},
            delete_on_preemption=scheduling.get("instanceTerminationAction") == "DELETE",
            nic_types=tuple(n.get("nicType", "") for n in props.get("networkInterfaces") or [{}]),
            provisioning_model=scheduling.get("provisioningModel")
            or ("SPOT" if scheduling.get("preemptible") else "STANDARD"),
            max_run_s=float((scheduling.get("maxRunDuration") or {}).get("seconds") or 0) or None,
        )


def needs(scenario: Scenario, zone: str, shape: VmShape) -> dict[tuple[str, str], float]:
    """{(scope, metric): amount} one VM of `shape` in `zone` draws on (scope: a region, "global", or
    "family:<region>:<gpu_family>")."""
    from stacks.targets.gcp.gpus import GPU_TYPES

    region = region_of(zone)
    regional = scenario.regions[region].quotas if region in scenario.regions else {}
    machine = scenario.machine_types.get(shape.machine_type)
    out: dict[tuple[str, str], float] = {}

    def add(scope: str, metric: str, amount: float) -> None:
        out[(scope, metric)] = out.get((scope, metric), 0) + amount

    preemptible = shape.spot or shape.flex_start  # preemptible quota where the region grants some
    if machine is not None:
        family_cpus = f"{shape.machine_type.split('-', 1)[0].upper()}_CPUS"
        if preemptible and regional.get("PREEMPTIBLE_CPUS") and regional["PREEMPTIBLE_CPUS"].limit != 0:
            add(region, "PREEMPTIBLE_CPUS", machine.vcpus)
        else:
            add(region, family_cpus if family_cpus in regional else "CPUS", machine.vcpus)
        add("global", "CPUS_ALL_REGIONS", machine.vcpus)
    gpus = {**(machine.gpus if machine else {}), **shape.accelerators}
    for accelerator, count in gpus.items():
        gpu = GPU_TYPES.get(accelerator)
        add("global", "GPUS_ALL_REGIONS", count)
        if gpu is None:
            continue
        if gpu.gpu_family and gpu.metric not in regional:
            families = scenario.regions[region].gpu_families if region in scenario.regions else {}
            spot_family = families.get("PREEMPTIBLE_GPUS_PER_GPU_FAMILY", {}).get(gpu.gpu_family)
            metric = (
                "PREEMPTIBLE_GPUS_PER_GPU_FAMILY"
                if preemptible and spot_family is not None and spot_family.limit != 0
                else "GPUS_PER_GPU_FAMILY"
            )
            add(f"family:{region}:{gpu.gpu_family}", metric, count)
        elif preemptible and regional.get(gpu.spot_metric) and regional[gpu.spot_metric].limit != 0:
            add(region, gpu.spot_metric, count)
        else:
            add(region, gpu.metric, count)
    disk = {"pd-balanced": "SSD_TOTAL_GB", "pd-ssd": "SSD_TOTAL_GB", "pd-standard": "DISKS_TOTAL_GB"}
    if shape.disk_type in disk:
        add(region, disk[shape.disk_type], shape.disk_gb)
    add(region, "INSTANCES", 1)
    return out


def quota(scenario: Scenario, scope: str, metric: str) -> Quota | None:
    """The scenario's Quota for a scope and metric, or None where the project reports none."""
    if scope == "global":
        return scenario.global_quotas.get(metric)
    if scope.startswith("family:"):
        _, region, family = scope.split(":")
        return scenario.regions[region].gpu_families.get(metric, {}).get(family)
    return scenario.regions[scope].quotas.get(metric) if scope in scenario.regions else None


def usage(scenario: Scenario, scope: str, metric: str, live: Iterable[tuple[str, VmShape]]) -> float:
    """The scenario's usage plus what the live VMs ((zone, shape) each) draw."""
    base = quota(scenario, scope, metric)
    used = base.usage if base is not None else 0.0
    for zone, shape in live:
        used += needs(scenario, zone, shape).get((scope, metric), 0)
    return used


def short_quota(
    scenario: Scenario, zone: str, shape: VmShape, live: list[tuple[str, VmShape]]
) -> tuple[str, float, str] | None:
    """(metric, limit, region or "global") of the first quota a new VM of `shape` in `zone` would exceed."""
    for (scope, metric), amount in needs(scenario, zone, shape).items():
        found = quota(scenario, scope, metric)
        if found is None or found.limit == -1:
            continue  # not reported: Compute Engine is not asked to enforce what the scenario leaves out
        if usage(scenario, scope, metric, live) + amount > found.limit:
            return metric, found.limit, scope.split(":")[1] if scope.startswith("family:") else scope
    return None
