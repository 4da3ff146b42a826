"""The simulated cloud's flex-start queue: instanceGroupManagerResizeRequests
(https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagerResizeRequests) for VMs of the
flex-start provisioning model (https://cloud.google.com/compute/docs/instances/about-flex-start-vms, read
2026-11-29).

A request stays ACCEPTED (queued) until the zone's flex-start capacity comes (scenario `flex_start_after_s`;
never where null), then the group's target size grows by resizeBy and ALL its VMs are created at once (CREATING),
or none where one is refused (FAILED, the refusal in status.error); SUCCEEDED once every VM runs. Flex-start VMs
are never preempted (refusals.py and SimCloud preempt Spot VMs only) and are deleted maxRunDuration after they
started running; the group does not recreate them (its size shrinks). maxRunDuration counts wall seconds (`speedup`
simulated ones each): the trainer on the VM trains in wall time, and the VM agent's own max_run_hours deadline is
wall time too, so the VM lives as long as the run may.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stacks.targets.gcp.sim import instances as sim

if TYPE_CHECKING:
    from stacks.targets.gcp.sim.cloud import Group, SimCloud


@dataclass
class ResizeRequest:
    """One instanceGroupManagerResizeRequest: its VMs all at once, after the zone's flex-start queue."""

    name: str
    resize_by: int
    id: int
    created_s: float  # simulated time it was inserted
    created: str  # its creationTimestamp
    description: str = ""
    state: str = "ACCEPTED"  # ACCEPTED (queued), CREATING, SUCCEEDED, FAILED
    instances: list[str] = field(default_factory=list)  # the VMs it created
    error: dict | None = None  # {"code", "message"} of a FAILED request


def advance(cloud: SimCloud, group: Group, now: float) -> None:
    """Requests whose capacity came create all their VMs; CREATING ones succeed once all run; VMs past their
    maxRunDuration are deleted."""
    for request in group.resize_requests.values():
        if request.state == "CREATING":
            vms = [group.instances.get(n) for n in request.instances]
            if all(vm is not None and vm.status == "RUNNING" for vm in vms):
                request.state = "SUCCEEDED"
        if request.state == "ACCEPTED":
            _arrive(cloud, group, request, now)
    for vm in list(group.instances.values()):
        max_run = (vm.shape.max_run_s or 0) * cloud.scenario.speedup
        if vm.status == "RUNNING" and max_run and now >= vm.since_s + max_run:
            # instanceTerminationAction DELETE; a group with resize requests does not recreate it
            group.target_size = max(group.target_size - 1, 0)
            cloud._set(vm, "STOPPING", "DELETING", now)
            cloud._tell("stopping", vm)


def _arrive(cloud: SimCloud, group: Group, request: ResizeRequest, now: float) -> None:
    zone = group.location
    after = cloud.scenario.zones[zone].flex_start_after_s if zone in cloud.scenario.zones else None
    if after is None or now < request.created_s + after:
        return
    created: list[sim.Instance] = []
    for name in cloud.new_names(group, request.resize_by):
        vm = sim.Instance(name, zone, cloud._shape(group, name), next(cloud._ids), since_s=now)
        problem = cloud.refusal(zone, vm.shape, name, group)
        if problem is not None:  # all or nothing: the ones made so far go again
            for made in created:
                del group.instances[made.name]
            request.state, request.error = "FAILED", {"code": problem[0], "message": problem[1]}
            return
        cloud._set(vm, "PROVISIONING", "CREATING", now)
        group.instances[name] = vm
        created.append(vm)
    group.target_size += request.resize_by
    request.state, request.instances = "CREATING", [vm.name for vm in created]


def insert(cloud: SimCloud, scope: str, name: str, body: dict) -> ResizeRequest:
    """instanceGroupManagerResizeRequests.insert: queued (ACCEPTED) until the zone's flex-start capacity comes."""
    with cloud.lock:
        group = cloud.group(scope, name)
        request_name = body.get("name") or ""
        if not request_name:
            raise sim.SimError(400, "Invalid value for field 'resource.name': ''.", "invalid")
        if request_name in group.resize_requests:
            raise sim.SimError(
                409, f"The resource '{url(cloud, scope, name, request_name)}' already exists", "alreadyExists"
            )
        count = int(body.get("resizeBy") or 0)
        if count < 1:
            raise sim.SimError(400, "Invalid value for field 'resource.resizeBy': must be at least 1.", "invalid")
        now = cloud.now_s()
        request = ResizeRequest(
            request_name,
            count,
            next(cloud._ids),
            now,
            sim.stamp(cloud.market.origin + now),
            body.get("description") or "",
        )
        group.resize_requests[request_name] = request
        cloud._advance_group(group, now)
        return request


def get(cloud: SimCloud, scope: str, name: str, request_name: str) -> ResizeRequest:
    found = cloud.group(scope, name).resize_requests.get(request_name)
    if found is None:
        raise sim.SimError(404, f"The resource '{url(cloud, scope, name, request_name)}' was not found")
    return found


def delete(cloud: SimCloud, scope: str, name: str, request_name: str) -> None:
    """delete (or cancel): a queued request leaves the queue; VMs it created stay in the group."""
    with cloud.lock:
        get(cloud, scope, name, request_name)
        del cloud.groups[(scope, name)].resize_requests[request_name]


def url(cloud: SimCloud, scope: str, name: str, request_name: str) -> str:
    return f"{cloud.group_url(scope, name)}/resizeRequests/{request_name}"
