"""What the managed instance group could not do: its VM creation errors (instanceGroupManagers.listErrors).

The group is created without waiting for its VMs (Spot capacity may take a while), so no Spot
capacity, a CPU or disk quota, or an org policy refusing the boot image shows nowhere but in the
group's error list, while the group keeps retrying and `trainctl train` waits for a status.json
that never comes. `trainctl train` and `trainctl status` print each error once from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Codes Compute Engine reports when it cannot create a VM, and what to do about each kind.
CAPACITY = (
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "STOCKOUT",
    "RESOURCE_POOL_EXHAUSTED",
)
QUOTA = ("QUOTA_EXCEEDED",)
POLICY = ("CONDITION_NOT_MET", "RESOURCE_NOT_ALLOWED")
# A Spot VM preempted while it was being created: the zone's capacity, like a stockout. SkyPilot's GCP failover
# (sky/backends/cloud_vm_ray_backend.py, its GCP error handler) blocks the zone on UNSUPPORTED_OPERATION, "observed
# empirically when VM is preempted during creation"; the message below is the same event as Compute Engine words it.
PREEMPTED_IN_CREATION = ("UNSUPPORTED_OPERATION",)
PREEMPTED_MESSAGE = "failed to start due to preemption"
# Allocation quotas are regional or global (https://cloud.google.com/compute/quotas, "Allocation quotas"; the
# *_ALL_REGIONS metrics count every region: https://cloud.google.com/compute/resource-usage): a QUOTA_EXCEEDED
# names its metric and, for a regional one, its region, e.g. "Quota 'PREEMPTIBLE_CPUS' exceeded.  Limit: 4.0 in
# region europe-west4." Another zone of that region meets the same quota; no region escapes a global one.
# Not an error code of Compute Engine's: a flex-start resize request still queued (state ACCEPTED,
# https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagerResizeRequests). The run has no VM
# while it waits, like a dry Spot zone: a capacity problem, moved on from after the rung's wait limit.
FLEX_START_QUEUED = "FLEX_START_QUEUED"
QUOTA_MESSAGE = re.compile(r"Quota '(?P<metric>[A-Z0-9_]+)' exceeded(?:.*? in region (?P<region>[a-z0-9-]+))?")


EVERY_REGION = "every-region"  # a problem kind (stacks.runs.watch.CreationProblem): no placement escapes it


@dataclass(frozen=True)
class GroupError:
    """One entry of the group's error list."""

    zone: str
    code: str
    message: str
    instance: str = ""
    timestamp: str = ""

    def line(self) -> str:
        if self.code == FLEX_START_QUEUED:
            return f"{self.zone}: {self.message}"
        vm = f" ({self.instance.rsplit('/', 1)[-1]})" if self.instance else ""
        return f"VM creation failed in {self.zone}{vm}: {self.code}: {self.message}"


def advice(error: GroupError, *, project: str, env: str, spot: bool) -> str:
    """What the operator can change for this kind of error."""
    env_file = f"envs/{env}.yaml"
    if error.code == FLEX_START_QUEUED:
        return (
            f"Google's flex-start capacity has not come in {error.zone} yet: the run waits up to "
            f"flex_start_wait_minutes, then takes the next rung of `capacity` (or another zone: `gcp.zones` of "
            f"{env_file})"
        )
    if error.code in CAPACITY:
        return (
            f"no capacity for this machine in {error.zone}: list other zones (or regions) first in `gcp.zones` / "
            f"`gcp.fallback_zones` of {env_file}"
            + (", or set spot: false (on-demand capacity)" if spot else "")
            + "; `trainctl quota` shows where quota allows it"
        )
    if Problem(error, "").kind == EVERY_REGION:
        metric = QUOTA_MESSAGE.search(error.message)["metric"]
        return (
            f"{metric} counts the project's use in every region, so no zone can start the run's VMs: raise it "
            f"(https://console.cloud.google.com/iam-admin/quotas?project={project}), or wait for other VMs to stop"
        )
    if error.code in QUOTA:
        return (
            f"request the quota the message names: https://console.cloud.google.com/iam-admin/quotas?project="
            f"{project} (or move to a region with room: `gcp.zones` in {env_file}; `trainctl quota`)"
        )
    if error.code in POLICY:
        return (
            "an organization policy refuses part of the VM (boot image project, external IP, Shielded VM, ...): "
            f"`trainctl doctor --env {env}` names the settings (boot_image, secure_boot, network)"
        )
    return f"`trainctl doctor --env {env}`, then `trainctl destroy` and train again"


@dataclass
class GroupErrors:
    """New entries of one group's error list at each call (each entry once)."""

    project: str
    zone: str
    group: str
    endpoint: str | None = None
    flex_start: bool = False  # also read the group's resize requests (rung flex_start)
    seen: set = field(default_factory=set)
    _client: object = None
    _requests: object = None

    def new(self) -> list[GroupError]:
        """The entries not returned before, oldest first; [] while the group is missing (not applied yet)."""
        from google.api_core import exceptions as gexc

        from stacks.targets.gcp import api

        if self._client is None:
            self._client = api.compute_client("InstanceGroupManagersClient", self.endpoint)
        try:
            items = list(
                self._client.list_errors(
                    project=self.project, zone=self.zone, instance_group_manager=self.group, timeout=30
                )
            )
        except gexc.NotFound:
            return []
        found = [
            GroupError(
                self.zone,
                item.error.code or "UNKNOWN",
                item.error.message or "",
                item.instance_action_details.instance or "",
                item.timestamp or "",
            )
            for item in items
        ]
        if self.flex_start:
            found += self._resize_requests()
        fresh = []
        for error in found:
            key = (error.timestamp, error.code, error.message, error.instance)
            if key not in self.seen:
                self.seen.add(key)
                fresh.append(error)
        return sorted(fresh, key=lambda e: e.timestamp)

    def _resize_requests(self) -> list[GroupError]:
        """A queued flex-start request (ACCEPTED) as one entry, a FAILED one as its error."""
        from stacks.targets.gcp import api

        if self._requests is None:
            self._requests = api.compute_client("InstanceGroupManagerResizeRequestsClient", self.endpoint)
        found = []
        for request in self._requests.list(
            project=self.project, zone=self.zone, instance_group_manager=self.group, timeout=30
        ):
            if request.state == "ACCEPTED":
                since = _hh_mm(request.creation_timestamp)
                message = f"flex-start request queued since {since} for {request.resize_by} node(s)"
                found.append(GroupError(self.zone, FLEX_START_QUEUED, message, "", request.creation_timestamp))
            elif request.state == "FAILED":
                errors = list(request.status.error.errors) or [None]
                code = errors[0].code if errors[0] is not None else "UNKNOWN"
                message = errors[0].message if errors[0] is not None else f"flex-start request {request.name} failed"
                found.append(GroupError(self.zone, code or "UNKNOWN", message, "", request.creation_timestamp))
        return found


def _hh_mm(timestamp: str) -> str:
    """HH:MM UTC of a Compute Engine timestamp (the text itself where it does not parse)."""
    from datetime import datetime, timezone

    try:
        return datetime.fromisoformat(timestamp).astimezone(timezone.utc).strftime("%H:%M UTC")
    except ValueError:
        return timestamp


@dataclass(frozen=True)
class Problem:
    """A group error as `follow` reports it: its line and what to do (stacks.runs.watch.CreationProblem)."""

    error: GroupError
    hint: str

    @property
    def kind(self) -> str:
        """capacity or quota (another zone may have it), every-region (a global quota: no zone has it), else other."""
        code, message = self.error.code, self.error.message
        if code in (*CAPACITY, FLEX_START_QUEUED, *PREEMPTED_IN_CREATION) or PREEMPTED_MESSAGE in message.lower():
            return "capacity"
        if code in QUOTA:
            quota = QUOTA_MESSAGE.search(message)
            return EVERY_REGION if quota and quota["metric"].endswith("_ALL_REGIONS") else "quota"
        return "other"

    @property
    def queued(self) -> bool:
        """A flex-start request waiting its turn (ACCEPTED), not an error."""
        return self.error.code == FLEX_START_QUEUED

    def rules_out(self, placement) -> bool:
        """Whether the same error would come at `placement` too: a regional quota, in every zone of its region."""
        quota = QUOTA_MESSAGE.search(self.error.message) if self.error.code in QUOTA else None
        region = quota["region"] if quota else None
        zone = getattr(placement, "zone", None)
        return bool(region and zone and zone != self.error.zone and zone.rsplit("-", 1)[0] == region)

    def line(self) -> str:
        return self.error.line()


def group_error_poller(config, lang: str, zone: str, reporter):
    """A callable returning the new errors of `lang`'s group as Problems; a failure to read the list is warned
    once and reading goes on at the next call (a lost list would keep a dry zone's run from moving); a refused
    permission stops it (the run is still followed through its bucket)."""
    from google.api_core import exceptions as gexc

    from stacks.naming import group_name
    from stacks.targets.gcp import api

    errors = GroupErrors(
        config.gcp.project, zone, group_name(config.env, lang), flex_start=config.language(lang).rung == "flex_start"
    )
    spot = config.language(lang).spot
    warned: list[str] = []
    refused: list[str] = []

    def new() -> list[Problem]:
        if refused:
            return []
        try:
            found = errors.new()
        except api.client_failures() as exc:
            if isinstance(exc, gexc.PermissionDenied):
                refused.append(str(exc))
            if not warned:
                warned.append(str(exc))
                reporter.warn(
                    f"could not read the errors of group {errors.group} (needs "
                    f"compute.instanceGroupManagers.get; {'not asked again' if refused else 'asked again'}"
                    f"): {exc}"
                )
            return []
        return [Problem(e, advice(e, project=config.gcp.project, env=config.env, spot=spot)) for e in found]

    return new


def group_running(config, lang: str, zone: str, endpoint: str | None = None) -> bool | None:
    """Whether `lang`'s group has its VMs up (listManagedInstances: instanceStatus RUNNING, currentAction NONE,
    one per node); None when the group cannot be read, or is not in `zone` (then nothing is moved on its account)."""
    from stacks.naming import group_name
    from stacks.targets.gcp import api

    try:
        client = api.compute_client("InstanceGroupManagersClient", endpoint)
        items = list(
            client.list_managed_instances(
                project=config.gcp.project, zone=zone, instance_group_manager=group_name(config.env, lang), timeout=30
            )
        )
    except api.client_failures():  # NotFound too: the run's group is not where it was looked for
        return None
    up = sum(i.instance_status == "RUNNING" and i.current_action == "NONE" for i in items)
    return up >= max(config.language(lang).nodes, 1)  # a multi-node run missing one node trains nowhere
