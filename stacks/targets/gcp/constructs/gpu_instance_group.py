"""GpuInstanceGroup: a GPU instance template (Spot, flex-start or on-demand) and the zonal managed group that runs
it; at rung flex_start the group starts empty and one resize request asks for all its nodes at once."""

from __future__ import annotations

from constructs import Construct

from stacks.targets.gcp.cdk_google import (
    ComputeInstanceGroupManager,
    ComputeInstanceGroupManagerVersion,
    ComputeInstanceTemplate,
    ComputeInstanceTemplateDisk,
    ComputeInstanceTemplateGuestAccelerator,
    ComputeInstanceTemplateNetworkInterface,
    ComputePerInstanceConfig,
    ComputeResizeRequest,
    ComputeResourcePolicy,
)

FLEX_START_MAX_RUN_S = 7 * 24 * 3600  # a flex-start VM runs at most seven days


class GpuInstanceGroup(Construct):
    """Exposes `template`, `group`, when nodes > 1 `node_configs` (stable names) and `placement` (unless off), and
    at rung flex_start `resize_request` (None otherwise). `rung` defaults to spot or on_demand from `spot`
    (and spot: false makes a spot rung on_demand);
    `max_run_hours` bounds a flex-start VM's max_run_duration."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: str,
        name: str,
        zone: str,
        machine_type: str,
        gpu_type: str,
        gpu_count: int,
        nodes: int,
        spot: bool,
        boot_image: str,
        disk_gb: int,
        disk_type: str,
        service_account: str,
        network: str,
        subnetwork: str | None,
        labels: dict[str, str],
        metadata: dict[str, str],
        rung: str | None = None,
        max_run_hours: float = 24.0,
        preconditions: list[dict] | None = None,
        secure_boot: bool = False,
        compact_placement: bool = True,
        network_tags: list[str] | None = None,
        nic_type: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        rung = "on_demand" if (rung or "spot") == "spot" and not spot else (rung or "spot")  # spot: false wins
        flex = rung == "flex_start"
        self.placement = self._placement(project, name, zone) if nodes > 1 and compact_placement else None
        self.template = self._template(
            project=project,
            name=name,
            machine_type=machine_type,
            gpu_type=gpu_type,
            gpu_count=gpu_count,
            nodes=nodes,
            scheduling=_scheduling(rung, max_run_hours),
            boot_image=boot_image,
            disk_gb=disk_gb,
            disk_type=disk_type,
            service_account=service_account,
            network=network,
            subnetwork=subnetwork,
            labels=labels,
            metadata=metadata,
            secure_boot=secure_boot,
            network_tags=network_tags,
            nic_type=nic_type,
        )
        self.group = self._group(project, name, zone, nodes, preconditions, flex=flex)
        # Stable names <name>-0..N-1: node 0 is torchrun's rendezvous endpoint. A resize request names its VMs itself.
        self.node_configs = self._node_configs(project, name, zone, nodes) if nodes > 1 and not flex else []
        self.resize_request = self._resize_request(project, name, zone, nodes) if flex else None

    def _placement(self, project: str, name: str, zone: str) -> ComputeResourcePolicy:
        # Nodes close together: NCCL traffic between nodes is the bottleneck. No vm_count: with it
        # the policy holds exactly that many VMs created together, and a Spot node the group
        # recreates alone would wait for its peers; without it placement is best effort
        # (docs/DECISIONS.md, "Multi-node placement").
        return ComputeResourcePolicy(
            self,
            "placement",
            project=project,
            region=zone.rsplit("-", 1)[0],
            name=f"{name}-compact",
            group_placement_policy={"collocation": "COLLOCATED"},
        )

    def _template(
        self,
        *,
        project: str,
        name: str,
        machine_type: str,
        gpu_type: str,
        gpu_count: int,
        nodes: int,
        scheduling: dict,
        boot_image: str,
        disk_gb: int,
        disk_type: str,
        service_account: str,
        network: str,
        subnetwork: str | None,
        labels: dict[str, str],
        metadata: dict[str, str],
        secure_boot: bool,
        network_tags: list[str] | None,
        nic_type: str | None,
    ) -> ComputeInstanceTemplate:
        """The instance template of every node: machine, GPUs, boot disk, identity, network, shielded VM."""
        return ComputeInstanceTemplate(
            self,
            "template",
            project=project,
            name_prefix=f"{name}-",
            machine_type=machine_type,
            description=f"trainstack {name}: {nodes} x {machine_type} with {gpu_count} x {gpu_type}",
            labels=labels,
            metadata=metadata,
            disk=[
                ComputeInstanceTemplateDisk(
                    source_image=boot_image, disk_size_gb=disk_gb, disk_type=disk_type, boot=True, auto_delete=True
                )
            ],
            guest_accelerator=[ComputeInstanceTemplateGuestAccelerator(type=gpu_type, count=gpu_count)],
            scheduling=scheduling,
            # Flex-start capacity comes from its own pool: a template that may consume a reservation is refused.
            reservation_affinity={"type": "NO_RESERVATION"}
            if scheduling["provisioning_model"] == "FLEX_START"
            else None,
            service_account={"email": service_account, "scopes": ["cloud-platform"]},
            # No access_config: no external IP. Egress to Google APIs goes through Private
            # Google Access (or Cloud NAT) on the subnetwork (README: Google Cloud setup).
            # nic_type GVNIC where the series requires it (A3: no VM is created without it); else the default.
            network_interface=[
                ComputeInstanceTemplateNetworkInterface(network=network, subnetwork=subnetwork, nic_type=nic_type)
            ],
            # The foundation's firewall rule lets VMs with this tag reach each other (multi-node runs).
            tags=network_tags,
            # Secure Boot refuses kernel modules not signed by a key in the VM's UEFI db: on for
            # images with signed drivers (COS), off by default where the driver a Deep Learning VM
            # installs at first boot may not be (a refused driver fails every run). The switch is
            # `secure_boot` (org policy compute.requireShieldedVm). vTPM + integrity monitoring stay on.
            shielded_instance_config={
                "enable_secure_boot": secure_boot,
                "enable_vtpm": True,
                "enable_integrity_monitoring": True,
            },
            resource_policies=[self.placement.self_link] if self.placement else None,
            # A new run replaces the template; the group must never point at a deleted one.
            lifecycle={"create_before_destroy": True},
        )

    def _group(
        self, project: str, name: str, zone: str, nodes: int, preconditions: list[dict] | None, *, flex: bool
    ) -> ComputeInstanceGroupManager:
        """The zonal managed group running the template; its size is left to the VMs once created."""
        group = ComputeInstanceGroupManager(
            self,
            "group",
            project=project,
            name=name,
            zone=zone,
            base_instance_name=name,
            description=f"trainstack {name}; scaled to 0 by its own node 0 when the run ends",
            version=[
                ComputeInstanceGroupManagerVersion(name="trainer", instance_template=self.template.self_link_unique)
            ],
            # nodes > 1: each per-instance config creates its named VM (createInstances
            # raises the size), so the group starts empty. Afterwards the size belongs to the
            # VM side (node 0 resizes it to 0 at the end): Terraform must not undo that.
            # flex_start: the resize request raises it, for all nodes at once.
            target_size=nodes if nodes == 1 and not flex else 0,
            # Spot capacity may take a while; trainctl follows the run through the bucket instead.
            wait_for_instances=False,
            # Preempted (deleted) Spot VMs are recreated under the same name; the trainer resumes. A group with
            # resize requests must not repair: flex-start VMs come only through a request, all together.
            instance_lifecycle_policy={
                "default_action_on_failure": "DO_NOTHING" if flex else "REPAIR",
                "force_update_on_repair": "NO",
            },
            # Never roll a running training job onto a new template behind its back.
            update_policy={
                "type": "OPPORTUNISTIC",
                "minimal_action": "REPLACE",
                "replacement_method": "RECREATE",
                "max_surge_fixed": 0,
                "max_unavailable_fixed": max(nodes, 1),
            },
        )
        if preconditions:
            group.add_override("lifecycle.precondition", preconditions)
        group.add_override("lifecycle.ignore_changes", ["target_size"])
        return group

    def _resize_request(self, project: str, name: str, zone: str, nodes: int) -> ComputeResizeRequest:
        """Flex-start: one request for every node; it waits in Google's queue until all of them can start."""
        return ComputeResizeRequest(
            self,
            "flex_start",
            project=project,
            zone=zone,
            instance_group_manager=self.group.name,
            name=f"{name}-flex-start",
            resize_by=nodes,
            description=f"trainstack {name}: {nodes} flex-start VM(s), all at once",
        )

    def _node_configs(self, project: str, name: str, zone: str, nodes: int) -> list[ComputePerInstanceConfig]:
        """One per-instance config per rank: each creates (and keeps) the VM <name>-<rank>."""
        return [
            ComputePerInstanceConfig(
                self,
                f"node_{rank}",
                project=project,
                zone=zone,
                instance_group_manager=self.group.name,
                name=f"{name}-{rank}",
                minimal_action="NONE",
                most_disruptive_allowed_action="REPLACE",
                remove_instance_on_destroy=True,
                remove_instance_state_on_destroy=True,
                preserved_state={"metadata": {"trainstack-rank": str(rank)}},
            )
            for rank in range(nodes)
        ]


def _scheduling(rung: str, max_run_hours: float) -> dict:
    if rung == "on_demand":
        return {
            "provisioning_model": "STANDARD",
            "preemptible": False,
            "automatic_restart": False,
            "on_host_maintenance": "TERMINATE",
        }
    if rung == "flex_start":
        # Never preempted; deleted when max_run_duration ends (at most seven days), so the run's own
        # max_run_hours bounds it too. No restart: a flex-start VM that stops is gone.
        seconds = min(FLEX_START_MAX_RUN_S, max(60, int(max_run_hours * 3600)))
        return {
            "provisioning_model": "FLEX_START",
            "preemptible": False,
            "automatic_restart": False,
            "on_host_maintenance": "TERMINATE",
            "instance_termination_action": "DELETE",
            "max_run_duration": {"seconds": seconds},
        }
    # GPU VMs cannot live-migrate; a preempted VM is deleted and the group recreates it.
    return {
        "provisioning_model": "SPOT",
        "preemptible": True,
        "automatic_restart": False,
        "on_host_maintenance": "TERMINATE",
        "instance_termination_action": "DELETE",
    }
