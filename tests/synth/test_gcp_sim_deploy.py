"""The simulated cloud's apply and destroy of the real synthesized training stacks (`trainctl synth --env dev`,
the session's synthesis that test_gcp_stacks checks: fr one Spot g2-standard-8, en two on-demand g2-standard-24
nodes with 2 L4s each): exactly their resources, created through the sim's Compute Engine API; the quota
guard's precondition evaluated as Terraform does; Compute Engine's rules then decide whether the group gets
its VMs. Each test runs in well under a second once google-cloud-compute is imported."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacks.targets.gcp.sim import deploy
from stacks.targets.gcp.sim.cloud import SimCloud
from stacks.targets.gcp.sim.scenario import deep_merge, load_scenario
from stacks.targets.gcp.sim.server import SimServer
from stacks.targets.gcp.target import VM_SCRIPTS
from trainer.launchers.vm.metadata import MetadataClient

RUN_ID = "20261128-120000-ab12"
G2_24 = {"vcpus": 24, "memory_mb": 98304, "gpus": {"nvidia-l4": 2}}
# The stacks' zone with Spot capacity from the start, and g2-standard-24 on offer.
OPEN = {
    "zones": {"europe-west4-a": {"outages": [], "machine_types": ["g2-standard-8", "g2-standard-24"]}},
    "machine_types": {"g2-standard-24": G2_24},
}


@pytest.fixture
def stacks(synthesized) -> Path:
    root, _, _ = synthesized
    return root / "out1" / "stacks"


@pytest.fixture
def stack_of(stacks, tmp_path):
    """stack_of(name) -> a private copy of a synthesized stack's folder (the apply writes its state there)."""

    def copy(name: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "cdk.tf.json").write_text((stacks / name / "cdk.tf.json").read_text())
        return folder

    return copy


@pytest.fixture
def sim_of():
    servers = []

    def start(**overrides) -> SimServer:
        scenario = load_scenario(overrides=deep_merge({"speedup": 1e-6, **OPEN}, overrides))
        server = SimServer(SimCloud(scenario)).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


def vms(sim: SimServer, group: str) -> dict[str, tuple[str, str]]:
    found = sim.cloud.groups[("zones/europe-west4-a", group)].instances
    return {name: (vm.status, vm.action) for name, vm in found.items()}


def test_apply_creates_the_stacks_resources_its_vm_reads_the_templates_metadata_and_destroy_removes_them(
    sim_of, stack_of
):
    sim, stack = sim_of(), stack_of("train-fr")
    state = deploy.apply(stack, sim.url, variables={"run_id": RUN_ID})
    assert state.outputs["zone"] == "europe-west4-a" and state.outputs["run_id"] == RUN_ID
    assert [name for _, name in state.groups] == ["dev-train-fr"] and len(state.templates) == 1
    sim.cloud.skip(30)
    ((name, status),) = vms(sim, "dev-train-fr").items()
    assert status == ("RUNNING", "NONE")
    metadata = MetadataClient(root=f"http://{sim.metadata_host(name)}/computeMetadata/v1/", tries=1)
    assert metadata.require("trainstack-run-id") == RUN_ID
    assert metadata.require("trainstack-mig") == "dev-train-fr"
    assert metadata.attribute("shutdown-script") == (VM_SCRIPTS / "shutdown.sh").read_text()  # as Terraform reads it
    assert sim.cloud.usage("europe-west4", "PREEMPTIBLE_NVIDIA_L4_GPUS") == 1

    deploy.destroy(stack, sim.url)
    assert (sim.cloud.groups, sim.cloud.templates, sim.cloud.policies) == ({}, {}, {})
    assert sim.cloud.usage("europe-west4", "PREEMPTIBLE_NVIDIA_L4_GPUS") == 0
    assert not (stack / deploy.STATE_FILE).exists()


def test_a_two_node_stack_gets_its_named_vms_each_with_its_rank_in_a_placement_policy(sim_of, stack_of):
    sim = sim_of(regions={"europe-west4": {"quotas": {"G2_CPUS": 96, "NVIDIA_L4_GPUS": 8}}})
    deploy.apply(stack_of("train-en"), sim.url, variables={"run_id": RUN_ID})
    sim.cloud.skip(30)
    assert vms(sim, "dev-train-en") == {"dev-train-en-0": ("RUNNING", "NONE"), "dev-train-en-1": ("RUNNING", "NONE")}
    for rank in (0, 1):
        metadata = MetadataClient(root=f"http://{sim.metadata_host(f'dev-train-en-{rank}')}/computeMetadata/v1/")
        assert metadata.require("trainstack-rank") == str(rank)
    assert list(sim.cloud.policies) == [("europe-west4", "dev-train-en-compact")]
    assert sim.cloud.groups[("zones/europe-west4-a", "dev-train-en")].target_size == 2
    assert sim.cloud.usage("europe-west4", "NVIDIA_L4_GPUS") == 4  # on-demand quota: 2 nodes x 2 L4s


def test_the_second_node_of_a_run_is_refused_when_the_first_used_the_last_vcpus(sim_of, stack_of):
    """G2_CPUS 48 with 8 in use: the quota guard (GPUs only) passes, node 0 takes 24 vCPUs, node 1 finds 16."""
    sim = sim_of(regions={"europe-west4": {"quotas": {"NVIDIA_L4_GPUS": 8}}})
    deploy.apply(stack_of("train-en"), sim.url, variables={"run_id": RUN_ID})
    sim.cloud.skip(30)
    assert vms(sim, "dev-train-en") == {"dev-train-en-0": ("RUNNING", "NONE"), "dev-train-en-1": ("", "CREATING")}
    errors = sim.cloud.groups[("zones/europe-west4-a", "dev-train-en")].errors
    assert errors[-1]["error"] == {
        "code": "QUOTA_EXCEEDED",
        "message": "Quota 'G2_CPUS' exceeded.  Limit: 48.0 in region europe-west4.",
    }


def test_a_group_in_a_zone_without_the_gpu_never_gets_a_vm_and_lists_why(sim_of, stack_of):
    sim = sim_of(zones={"europe-west4-a": {"accelerators": ["nvidia-tesla-t4"]}})
    deploy.apply(stack_of("train-fr"), sim.url, variables={"run_id": RUN_ID})
    sim.cloud.skip(120)
    assert list(vms(sim, "dev-train-fr").values()) == [("", "CREATING")]
    errors = sim.cloud.groups[("zones/europe-west4-a", "dev-train-fr")].errors
    assert len(errors) == 3 and {e["error"]["code"] for e in errors} == {"RESOURCE_NOT_FOUND"}  # at 0, 60, 120 s
    assert "acceleratorTypes/nvidia-l4' was not found" in errors[0]["error"]["message"]


def test_the_quota_guard_stops_the_apply_before_anything_is_created_where_the_limit_is_short(sim_of, stack_of):
    sim = sim_of(regions={"europe-west4": {"quotas": {"NVIDIA_L4_GPUS": 3}}})  # en needs 4 on-demand L4s
    with pytest.raises(deploy.SimApplyError, match="GPU quota NVIDIA_L4_GPUS in europe-west4 is below the 4 GPU"):
        deploy.apply(stack_of("train-en"), sim.url, variables={"run_id": RUN_ID})
    assert (sim.cloud.groups, sim.cloud.templates, sim.cloud.policies) == ({}, {}, {})
    deploy.apply(stack_of("train-fr"), sim.url, variables={"run_id": RUN_ID})  # one Spot L4 fits


def test_a_stack_with_resources_the_sim_cannot_create_is_refused(sim_of, stack_of):
    sim = sim_of()
    with pytest.raises(deploy.SimApplyError, match="google_storage_bucket"):
        deploy.apply(stack_of("foundation"), sim.url)
    assert sim.cloud.templates == {}


def flex_start_stack(folder: Path, nodes: int) -> Path:
    """A flex-start group of `nodes` g2-standard-8 VMs in europe-west4-a (the construct alone, as synthesized)."""
    from stacks import cdk
    from stacks.cdk import TerraformStack
    from stacks.targets.gcp.cdk_google import GoogleProvider
    from stacks.targets.gcp.constructs.gpu_instance_group import GpuInstanceGroup

    stack = TerraformStack(cdk.Testing.app(), "flex")
    GoogleProvider(stack, "google", project="p1", region="europe-west4")
    GpuInstanceGroup(
        stack,
        "vms",
        project="p1",
        name="dev-train-fr",
        zone="europe-west4-a",
        machine_type="g2-standard-8",
        gpu_type="nvidia-l4",
        gpu_count=1,
        nodes=nodes,
        spot=False,
        rung="flex_start",
        max_run_hours=1,
        boot_image="projects/cos-cloud/global/images/family/cos-stable",
        disk_gb=100,
        disk_type="pd-balanced",
        service_account="sa@p1.iam.gserviceaccount.com",
        network="default",
        subnetwork=None,
        labels={},
        metadata={"trainstack-run-id": RUN_ID},
    )
    folder.mkdir()
    (folder / "cdk.tf.json").write_text(cdk.Testing.synth(stack))
    return folder


def test_a_flex_start_request_waits_in_the_queue_then_all_its_nodes_arrive_at_once(sim_of, tmp_path):
    """Queued (ACCEPTED, told by the creation errors as queued) for the zone's flex_start_after_s, then both VMs
    at once, on preemptible quota, never preempted, deleted at max_run_duration (1 h). Under a second."""
    from google.cloud import compute_v1

    from stacks.targets.gcp.group_errors import GroupErrors, Problem
    from trainer.launchers.vm.group import compute_client_kwargs

    quotas = {"PREEMPTIBLE_NVIDIA_L4_GPUS": 8, "NVIDIA_L4_GPUS": 8, "PREEMPTIBLE_CPUS": 64, "CPUS": 64}
    sim = sim_of(
        speedup=1,  # max_run_duration counts wall seconds, `speedup` simulated ones each
        zones={"europe-west4-a": {"flex_start_after_s": 1800, "outages": [{"start_s": 0}]}},  # Spot: dry all along
        regions={"europe-west4": {"quotas": quotas}},
    )
    stack = flex_start_stack(tmp_path / "flex", nodes=2)
    state = deploy.apply(stack, sim.url, variables={"run_id": RUN_ID})
    assert state.resize_requests == [["europe-west4-a", "dev-train-fr", "dev-train-fr-flex-start"]]
    requests = compute_v1.InstanceGroupManagerResizeRequestsClient(**compute_client_kwargs(sim.url))
    where = {"project": "p1", "zone": "europe-west4-a", "instance_group_manager": "dev-train-fr"}

    def request():
        return requests.get(**where, resize_request="dev-train-fr-flex-start")

    errors = GroupErrors("p1", "europe-west4-a", "dev-train-fr", endpoint=sim.url, flex_start=True)
    sim.cloud.skip(1700)
    assert request().state == "ACCEPTED" and request().resize_by == 2 and vms(sim, "dev-train-fr") == {}
    (queued,) = errors.new()
    assert Problem(queued, "").kind == "capacity"
    assert "flex-start request queued since" in queued.line() and "for 2 node(s)" in queued.line()
    assert errors.new() == []  # told once: the watch counts its wait from the first
    sim.cloud.skip(100)
    arrived = vms(sim, "dev-train-fr")
    assert len(arrived) == 2 and set(arrived.values()) == {("PROVISIONING", "CREATING")}  # all together
    assert request().state == "CREATING"
    assert sim.cloud.usage("europe-west4", "PREEMPTIBLE_NVIDIA_L4_GPUS") == 2  # flex-start: preemptible quota
    assert sim.cloud.usage("europe-west4", "NVIDIA_L4_GPUS") == 0
    sim.cloud.skip(60)
    assert set(vms(sim, "dev-train-fr").values()) == {("RUNNING", "NONE")} and request().state == "SUCCEEDED"
    vm = next(iter(sim.cloud.groups[("zones/europe-west4-a", "dev-train-fr")].instances.values()))
    assert vm.shape.provisioning_model == "FLEX_START" and vm.shape.max_run_s == 3600
    sim.cloud.skip(3600 - 60 + 60)  # Spot is dry all along: a Spot VM would be preempted; these run their hour
    assert sim.cloud.groups[("zones/europe-west4-a", "dev-train-fr")].target_size == 0
    deploy.destroy(stack, sim.url)
    assert not sim.cloud.groups


def test_a_flex_start_request_in_a_zone_whose_capacity_never_comes_stays_queued(sim_of, tmp_path):
    sim = sim_of(zones={"europe-west4-a": {"flex_start_after_s": None}})
    deploy.apply(flex_start_stack(tmp_path / "flex", nodes=1), sim.url, variables={"run_id": RUN_ID})
    sim.cloud.skip(24 * 3600)
    (request,) = sim.cloud.groups[("zones/europe-west4-a", "dev-train-fr")].resize_requests.values()
    assert request.state == "ACCEPTED" and vms(sim, "dev-train-fr") == {}
