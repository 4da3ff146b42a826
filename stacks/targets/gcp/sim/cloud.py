"""The simulated Compute Engine's state and the rules it enforces as time passes.

Time is the local Spot market's (trainer/launchers/market.py): simulated seconds since the sim started,
`speedup` of them per wall second; which zone is dry when, and which preemption fires, is that model's answer.
Every call first brings the state up to the present (`advance`), so the state is what a reader would find.

The rules, each with the page it comes from (read 2026-11-28):
- A managed instance group keeps creating the VMs its target size asks for; a VM it cannot create is listed
  with currentAction CREATING and "If the group fails to create this instance, it will try again until it is
  successful" (ManagedInstance.currentAction,
  https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/listManagedInstances); each
  failed try is an entry of instanceGroupManagers.listErrors (action CREATING, the instance, error code and
  message, timestamp: https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/listErrors).
  The sim tries again every `retry_s`.
- Which new VM is refused, with which code and message: refusals.py.
- Preemption: Compute Engine stops a Spot VM with up to 30 s of notice; the metadata server's
  instance/preempted then reads TRUE (https://cloud.google.com/compute/docs/instances/spot,
  https://cloud.google.com/compute/docs/instances/create-use-spot "Detect if a VM was preempted"); the group
  recreates it when capacity allows (currentAction RECREATING).
- resize: sets the target size; VMs above it are deleted (currentAction DELETING)
  (https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/resize).
- Flex-start resize requests: flex_start.py.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from stacks.targets.gcp.sim import flex_start, quotas, refusals
from stacks.targets.gcp.sim.instances import Instance, SimError, stamp
from stacks.targets.gcp.sim.quotas import LIVE, VmShape
from stacks.targets.gcp.sim.scenario import Scenario, region_of
from trainer.launchers.market import Market


@dataclass
class Group:
    """A managed instance group, zonal or regional. A regional group places each VM in the first of its zones
    with room, as distributionPolicy.targetShape ANY does (https://cloud.google.com/compute/docs/instance-groups/
    regional-mig-distribution-shape); the sim does not spread them EVEN or BALANCED."""

    scope: str  # zones/<zone> or regions/<region>
    name: str
    template: str  # the instance template's name
    target_size: int
    base_instance_name: str
    id: int
    created: str
    stable_names: dict[str, dict] = field(default_factory=dict)  # per-instance configs: name -> preserved metadata
    instances: dict[str, Instance] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    zones: list[str] = field(default_factory=list)  # a regional group's distributionPolicy zones
    last_try_s: float | None = None
    dry_tries: dict[str, int] = field(default_factory=dict)  # zone -> capacity refusals so far (error mix turn)
    rdzv_port: int = 0  # where its node 0 hosts the rendezvous store on this host (metadata_value)
    resize_requests: dict = field(default_factory=dict)  # name -> flex_start.ResizeRequest

    @property
    def location(self) -> str:
        return self.scope.split("/", 1)[1]


class SimCloud:
    """One project's simulated Compute Engine. Thread-safe: the HTTP server's threads share it."""

    def __init__(self, scenario: Scenario, *, origin: float | None = None, log_of: Callable | None = None):
        self.scenario = scenario
        self.market = Market.from_json(scenario.market().to_json(), time.time() if origin is None else origin)
        self.fired: dict[str, float] = {}
        self.skipped_s = 0.0  # simulated time moved ahead by `skip`
        self.templates: dict[str, dict] = {}
        self.groups: dict[tuple[str, str], Group] = {}
        self.operations: dict[str, dict] = {}
        self.policies: dict[tuple[str, str], dict] = {}  # (region, name) -> resourcePolicies resource
        self.lock = threading.RLock()
        self.log_of = log_of  # Instance -> the run log's lines its boot wrote: stage-triggered preemptions
        self.listeners: list[Callable[[str, Instance], None]] = []  # ("running" | "stopping" | "gone", vm)
        self._ids = itertools.count(7_000_000_000_000_000_001)

    # ------------------------------------------------------------------ time

    def now_s(self) -> float:
        return self.market.now_s() + self.skipped_s

    def wait_s(self, seconds: float) -> None:
        """Block the calling request (not the cloud: the lock is not held) until `seconds` of simulated time pass."""
        until = self.now_s() + seconds
        while self.now_s() < until:
            time.sleep(min(0.05, max((until - self.now_s()) / self.scenario.speedup, 0.001)))

    def skip(self, seconds: float) -> None:
        """Move the simulated clock `seconds` ahead at once (a rehearsal or a test need not wait for it)."""
        s = self.scenario
        step = max(min(s.retry_s, s.boot_s or s.retry_s, s.stop_s or s.retry_s), 1.0)
        with self.lock:
            while seconds > 0:  # in steps, so every boot, retry and preemption on the way happens
                jump = min(step, seconds)
                self.skipped_s += jump
                self.advance()
                seconds -= jump

    def advance(self) -> None:
        """Bring every group to the present: boots finish, preemptions fire, stopped VMs go, retries happen."""
        with self.lock:
            now = self.now_s()
            for group in list(self.groups.values()):
                self._advance_group(group, now)

    def _advance_group(self, group: Group, now: float) -> None:
        s = self.scenario
        flex_start.advance(self, group, now)
        for vm in list(group.instances.values()):
            if vm.status == "PROVISIONING" and now >= vm.since_s + s.boot_s:
                self._set(vm, "RUNNING", "NONE", now)
                self._tell("running", vm)
            elif vm.status == "STOPPING" and now >= vm.since_s + s.stop_s:
                if vm.action == "DELETING":
                    del group.instances[vm.name]
                    self._tell("gone", vm)
                else:  # preempted: stopped, or deleted (instanceTerminationAction); the group recreates it
                    self._set(vm, "" if vm.shape.delete_on_preemption else "TERMINATED", "RECREATING", now)
                    self._tell("gone", vm)
            elif vm.status == "RUNNING" and vm.shape.spot:
                log = self.log_of(vm) if self.log_of else []
                due = self.market.due_preemption(vm.zone, now, self.fired, log)
                if due is not None:
                    self.fired[due.key] = now
                    vm.preempted = True
                    self._set(vm, "STOPPING", "NONE", now)
                    self._tell("stopping", vm)
        live = [vm for vm in group.instances.values() if vm.action != "DELETING"]
        for vm in sorted(live, key=lambda v: v.name, reverse=True)[: max(len(live) - group.target_size, 0)]:
            if vm.status in LIVE:
                self._set(vm, "STOPPING", "DELETING", now)
                self._tell("stopping", vm)
            else:
                del group.instances[vm.name]
        for name in self._missing_names(group):
            group.instances[name] = Instance(name, "", self._shape(group, name), next(self._ids), since_s=now)
        waiting = [vm for vm in group.instances.values() if vm.action in ("CREATING", "RECREATING") and not vm.status]
        waiting += [vm for vm in group.instances.values() if vm.status == "TERMINATED" and vm.action == "RECREATING"]
        if waiting and (group.last_try_s is None or now >= group.last_try_s + s.retry_s):
            group.last_try_s = now
            for vm in sorted(waiting, key=lambda v: v.name):
                self._try_create(group, vm, now)

    def new_names(self, group: Group, count: int) -> list[str]:
        """`count` free names <base>-<4 hex digits>, as a group names the VMs it creates without a config."""
        names: list[str] = []
        while len(names) < count:
            name = f"{group.base_instance_name}-{next(self._ids) % 0x10000:04x}"
            if name not in group.instances and name not in names:
                names.append(name)
        return names

    def _missing_names(self, group: Group) -> list[str]:
        have = {n for n, vm in group.instances.items() if vm.action != "DELETING"}
        count = group.target_size - len(have)
        names = [n for n in sorted(group.stable_names) if n not in group.instances][: max(count, 0)]
        return names + self.new_names(group, count - len(names))

    def _shape(self, group: Group, name: str = "") -> VmShape:
        """The VM's shape from the group's template, with its per-instance config's preserved metadata."""
        shape = VmShape.from_template(self.templates.get(group.template) or {})
        extra = group.stable_names.get(name) or {}
        return replace(shape, metadata={**shape.metadata, **extra}) if extra else shape

    def _set(self, vm: Instance, status: str, action: str, now: float) -> None:
        vm.status, vm.action, vm.since_s = status, action, now

    def _tell(self, event: str, vm: Instance) -> None:
        for listener in self.listeners:
            listener(event, vm)

    # ------------------------------------------------------------------ creation rules

    def _try_create(self, group: Group, vm: Instance, now: float) -> None:
        vm.shape = self._shape(group, vm.name)  # a recreated VM takes the group's template as it is now
        zones = [group.location] if group.scope.startswith("zones/") else self._group_zones(group)
        refused = []
        for zone in zones:
            problem = self.refusal(zone, vm.shape, vm.name, group)
            if problem is None:
                vm.zone, vm.preempted = zone, False
                self._set(vm, "PROVISIONING", "CREATING" if vm.action == "CREATING" else "RECREATING", now)
                return
            refused.append((zone, problem))
        for zone, (code, message) in refused:  # a regional group: one entry per zone it tried
            group.errors.append(
                {
                    "instanceActionDetails": {
                        "action": "CREATING" if vm.action == "CREATING" else "RECREATING",
                        "instance": f"projects/{self.scenario.project}/zones/{zone}/instances/{vm.name}",
                        "version": {"instanceTemplate": self.template_url(group.template), "name": ""},
                    },
                    "error": {"code": code, "message": message},
                    "timestamp": stamp(self.market.origin + now),
                }
            )

    def _group_zones(self, group: Group) -> list[str]:
        """A regional group's zones: its distributionPolicy's, else every zone of its region."""
        return group.zones or [z for z in self.scenario.zones if region_of(z) == group.location]

    def refusal(self, zone: str, shape: VmShape, name: str, group: Group | None = None) -> tuple[str, str] | None:
        return refusals.refusal(self, zone, shape, name, group)

    # ------------------------------------------------------------------ quotas

    def usage(self, scope: str, metric: str) -> float:
        """The scenario's usage plus what the sim's live VMs draw."""
        return quotas.usage(self.scenario, scope, metric, self._live())

    def short_quota(self, zone: str, shape: VmShape) -> tuple[str, float, str] | None:
        return quotas.short_quota(self.scenario, zone, shape, self._live())

    def _live(self) -> list[tuple[str, VmShape]]:
        return [(vm.zone, vm.shape) for g in self.groups.values() for vm in g.instances.values() if vm.status in LIVE]

    # ------------------------------------------------------------------ resources

    def template_url(self, name: str) -> str:
        return f"projects/{self.scenario.project}/global/instanceTemplates/{name}"

    def insert_template(self, body: dict) -> dict:
        with self.lock:
            name = body.get("name") or ""
            if not name:
                raise SimError(400, "Invalid value for field 'resource.name': ''. Must be a match of regex", "invalid")
            if name in self.templates:
                raise SimError(409, f"The resource '{self.template_url(name)}' already exists", "alreadyExists")
            self.templates[name] = {**body, "id": str(next(self._ids)), "creationTimestamp": stamp()}
            return self.templates[name]

    def delete_template(self, name: str) -> None:
        with self.lock:
            if name not in self.templates:
                raise SimError(404, f"The resource '{self.template_url(name)}' was not found")
            users = [g.name for g in self.groups.values() if g.template == name]
            if users:
                raise SimError(
                    400,
                    f"The instance_template resource '{self.template_url(name)}' is already being used by "
                    f"'projects/{self.scenario.project}/{self.groups_scope_of(users[0])}/instanceGroupManagers/"
                    f"{users[0]}'",
                    "resourceInUseByAnotherResource",
                )
            del self.templates[name]

    def insert_policy(self, region: str, body: dict) -> dict:
        with self.lock:
            key = (region, body.get("name") or "")
            if key in self.policies:
                raise SimError(409, f"The resource '{self.policy_url(*key)}' already exists", "alreadyExists")
            self.policies[key] = {**body, "id": str(next(self._ids)), "status": "READY"}
            return self.policies[key]

    def policy_url(self, region: str, name: str) -> str:
        return f"projects/{self.scenario.project}/regions/{region}/resourcePolicies/{name}"

    def delete_policy(self, region: str, name: str) -> None:
        with self.lock:
            if self.policies.pop((region, name), None) is None:
                raise SimError(404, f"The resource '{self.policy_url(region, name)}' was not found")

    def groups_scope_of(self, name: str) -> str:
        return next(g.scope for g in self.groups.values() if g.name == name)

    def insert_group(self, scope: str, body: dict) -> Group:
        with self.lock:
            name = body.get("name") or ""
            if (scope, name) in self.groups:
                raise SimError(409, f"The resource '{self.group_url(scope, name)}' already exists", "alreadyExists")
            location = scope.split("/", 1)[1]
            known = location in self.scenario.zones if scope.startswith("zones/") else location in self.scenario.regions
            if not known:
                raise SimError(404, f"The resource 'projects/{self.scenario.project}/{scope}' was not found")
            versions = body.get("versions") or [{}]
            template = (body.get("instanceTemplate") or versions[0].get("instanceTemplate") or "").rsplit("/", 1)[-1]
            if template not in self.templates:
                raise SimError(404, f"The resource '{self.template_url(template)}' was not found", "notFound")
            group = Group(
                scope,
                name,
                template,
                int(body.get("targetSize") or 0),
                body.get("baseInstanceName") or name,
                next(self._ids),
                stamp(),
                rdzv_port=free_port(),
            )
            policy = body.get("distributionPolicy") or {}
            group.zones = [z.get("zone", "").rsplit("/", 1)[-1] for z in policy.get("zones") or [] if z.get("zone")]
            unknown = [z for z in group.zones if z not in self.scenario.zones or region_of(z) != location]
            if unknown:
                raise SimError(
                    400, f"Invalid value for field 'resource.distributionPolicy.zones': {unknown[0]}", "invalid"
                )
            self.groups[(scope, name)] = group
            self._advance_group(group, self.now_s())
            return group

    def group(self, scope: str, name: str) -> Group:
        self.advance()
        found = self.groups.get((scope, name))
        if found is None:
            raise SimError(404, f"The resource '{self.group_url(scope, name)}' was not found")
        return found

    def group_url(self, scope: str, name: str) -> str:
        return f"projects/{self.scenario.project}/{scope}/instanceGroupManagers/{name}"

    def resize(self, scope: str, name: str, size: int) -> Group:
        with self.lock:
            group = self.group(scope, name)
            group.target_size = max(int(size), 0)
            self._advance_group(group, self.now_s())
            return group

    def set_per_instance_configs(self, scope: str, name: str, configs: dict[str, dict], *, create: bool) -> Group:
        """Per-instance configs (name -> preserved metadata): VMs of these names get the metadata. `create`
        (instanceGroupManagers.createInstances, what Terraform's google_compute_per_instance_config calls for a
        VM the group lacks) adds the VMs and raises the target size by as many."""
        with self.lock:
            group = self.group(scope, name)
            new = [n for n in configs if n not in group.stable_names]
            group.stable_names.update(configs)
            if create:
                group.target_size += len(new)
            self._advance_group(group, self.now_s())
            return group

    def delete_group(self, scope: str, name: str) -> None:
        with self.lock:
            group = self.group(scope, name)
            for vm in group.instances.values():
                if vm.status in LIVE:
                    self._tell("gone", vm)
            del self.groups[(scope, name)]

    def instance(self, zone: str, name: str) -> Instance:
        self.advance()
        for group in self.groups.values():
            vm = group.instances.get(name)
            if vm is not None and vm.zone == zone and vm.status:
                return vm
        raise SimError(
            404, f"The resource 'projects/{self.scenario.project}/zones/{zone}/instances/{name}' was not found"
        )

    def instance_anywhere(self, name: str) -> Instance | None:
        found = self.instance_and_group(name)
        return found[0] if found else None

    def instance_and_group(self, name: str) -> tuple[Instance, Group] | None:
        self.advance()
        for group in self.groups.values():
            vm = group.instances.get(name)
            if vm is not None and vm.status:
                return vm, group
        return None


def free_port() -> int:
    """A port nothing on 127.0.0.1 listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
