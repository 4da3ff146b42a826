"""Which new VM Compute Engine refuses, with which error code and message (its group lists each refusal in
listErrors and tries again). The checks in order, each with the page it comes from (read 2026-11-28):
1. A zone without the machine type or the GPU: RESOURCE_NOT_FOUND, "The resource '.../acceleratorTypes/...' was
   not found" (https://cloud.google.com/compute/docs/gpus/gpu-regions-zones; Compute Engine's wording, as in
   hashicorp/terraform-provider-google#5860).
2. A Spot-only machine type (a3-highgpu-1g/2g/4g) asked for a standard VM
   (https://cloud.google.com/compute/docs/accelerator-optimized-machines, "Consumption option availability by
   machine type"). Google does not document the code; the sim answers INVALID_FIELD_VALUE (not a capacity
   error: no other zone helps).
3. A machine series that requires gVNIC (A3: stacks/targets/gcp/catalogue.yaml `nic_type`) asked for a VM whose
   network interface is not GVNIC: gVNIC is required from the third machine generation on
   (https://cloud.google.com/compute/docs/instances/create-vm-with-gvnic). Code and wording are the sim's
   (INVALID_FIELD_VALUE, not a capacity error).
4. Quota: QUOTA_EXCEEDED "Quota 'METRIC' exceeded.  Limit: N in region R." (a global one: "Limit: N globally.", as
   gcloud and Terraform quote Compute Engine for GPUS_ALL_REGIONS) where a quota the VM draws on has
   no room (quotas.py says which); a request over quota never reaches the zone's capacity.
5. No capacity (Spot VMs; on-demand ones too in a zone marked `on_demand_dry`), the market's answer for the zone
   now: ZONE_RESOURCE_POOL_EXHAUSTED, "The zone ... does not have enough resources available to fulfill the
   request.  Try a different zone, or try again later." It concerns new VMs only; running VMs keep running
   (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability). A zone's
   `capacity_errors` are mixed in, in turn: UNSUPPORTED_OPERATION is what SkyPilot's GCP handler observed "when
   VM is preempted during creation" (sky/provision/gcp/instance_utils.py), a capacity problem of the zone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stacks.targets.gcp.sim.quotas import VmShape
from trainer.launchers.market import NO_CAPACITY

if TYPE_CHECKING:
    from stacks.targets.gcp.sim.cloud import Group, SimCloud

SPOT_ONLY_REFUSAL = INVALID_FIELD = "INVALID_FIELD_VALUE"


def refusal(
    cloud: SimCloud, zone: str, shape: VmShape, name: str, group: Group | None = None
) -> tuple[str, str] | None:
    """(code, message) Compute Engine would refuse a new VM of `shape` in `zone` with now, or None."""
    s, project = cloud.scenario, cloud.scenario.project
    offer = s.zones.get(zone)
    machine = s.machine_types.get(shape.machine_type)
    if offer is None or shape.machine_type not in offer.machine_types or machine is None:
        return "RESOURCE_NOT_FOUND", (
            f"The resource 'projects/{project}/zones/{zone}/machineTypes/{shape.machine_type}' was not found"
        )
    for accelerator in {**machine.gpus, **shape.accelerators}:
        if accelerator not in offer.accelerators:
            return "RESOURCE_NOT_FOUND", (
                f"The resource 'projects/{project}/zones/{zone}/acceleratorTypes/{accelerator}' was not found"
            )
    if shape.provisioning_model == "STANDARD" and s.is_spot_only(shape.machine_type):
        return SPOT_ONLY_REFUSAL, (
            f"Invalid value for field 'resource.scheduling.provisioningModel': 'STANDARD'. Machine type "
            f"{shape.machine_type} is available only with the SPOT or FLEX_START provisioning model."
        )
    nic_type = s.required_nic_type(shape.machine_type)
    if nic_type and any(n != nic_type for n in shape.nic_types):
        return INVALID_FIELD, (
            f"Invalid value for field 'resource.networkInterfaces[0].nicType': "
            f"'{shape.nic_types[0] or 'VIRTIO_NET'}'. Machine type {shape.machine_type} requires {nic_type}."
        )
    short = cloud.short_quota(zone, shape)
    if short is not None:
        metric, limit, scope = short
        where = f" in region {scope}" if scope != "global" else " globally"
        return "QUOTA_EXCEEDED", f"Quota '{metric}' exceeded.  Limit: {limit:.1f}{where}."
    if shape.flex_start:
        return None  # its capacity comes through the resize request's queue (SimCloud), not the Spot market
    now = cloud.now_s()
    dry = not cloud.market.has_capacity(zone, now, cloud.fired)
    if dry and (shape.spot or offer.on_demand_dry):
        codes = [NO_CAPACITY, *offer.capacity_errors]
        turn = group.dry_tries.get(zone, 0) if group else 0
        code = codes[turn % len(codes)]
        if group:
            group.dry_tries[zone] = turn + 1
        return code, capacity_message(code, project, zone, name)
    return None


def capacity_message(code: str, project: str, zone: str, name: str) -> str:
    if code == NO_CAPACITY:
        return (
            f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the "
            "request.  Try a different zone, or try again later."
        )
    if code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS":
        return (
            f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the "
            "request.  '(resource type:compute)'."
        )
    if code == "UNSUPPORTED_OPERATION":
        return f"Instance '{name}' creation failed: Instance failed to start due to preemption."
    return f"Simulated {code} in zone {zone}: no capacity for instance '{name}'."
