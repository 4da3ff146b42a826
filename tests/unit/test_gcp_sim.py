"""The simulated Google Cloud's rules as time passes, asked through the real google-cloud-compute client and
the gcp target's own readers (quota preflight, group errors, group state, prices): quota usage that grows
with the sim's VMs, capacity windows and preemptions from the local market's model, error codes mixed,
zones without the GPU, Spot-only machine types. The clock is moved with `skip`, never waited for
(each test: well under a second of wall time)."""

from __future__ import annotations

import dataclasses

import pytest
import requests

from stacks.naming import group_name
from stacks.project import Project
from stacks.targets.gcp import group_errors, pricing
from stacks.targets.gcp.quota import ComputeQuotas, choose_zone
from stacks.targets.gcp.sim.cloud import Instance, SimCloud
from stacks.targets.gcp.sim.scenario import load_scenario
from stacks.targets.gcp.sim.server import SimServer
from trainer.launchers.vm.group import compute_client_kwargs
from trainer.launchers.vm.metadata import MetadataClient

FR_GROUP = group_name("dev", "fr")  # the group group_running and the poller read for `fr` in env dev
L4_SPOT = {"machine_type": "g2-standard-8", "gpu": "nvidia-l4", "count": 1, "spot": True}


@pytest.fixture
def sim_of():
    """sim_of(**scenario overrides) -> a running SimServer whose clock moves by `skip` only (a simulated second
    per million wall seconds)."""
    servers = []

    def start(**overrides) -> SimServer:
        server = SimServer(SimCloud(load_scenario(overrides={"speedup": 1e-6, **overrides})))
        servers.append(server.__enter__())
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


def compute(sim: SimServer, client: str):
    from google.cloud import compute_v1

    return getattr(compute_v1, client)(**compute_client_kwargs(sim.url))


def apply_group(
    sim, zone: str, name: str, *, machine_type, gpu, count, spot, size=1, disk_type="pd-balanced", nic_type=None
):
    """An instance template and a zonal group of `size`, created as the training stack creates them."""
    from google.cloud import compute_v1

    scheduling = compute_v1.Scheduling(provisioning_model="SPOT" if spot else "STANDARD")
    template = compute_v1.InstanceTemplate(
        name=f"{name}-tpl",
        properties=compute_v1.InstanceProperties(
            machine_type=machine_type,
            guest_accelerators=[compute_v1.AcceleratorConfig(accelerator_type=gpu, accelerator_count=count)],
            scheduling=scheduling,
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    initialize_params=compute_v1.AttachedDiskInitializeParams(disk_size_gb=100, disk_type=disk_type),
                )
            ],
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key="trainstack-run-id", value=name)]),
            network_interfaces=[compute_v1.NetworkInterface(network="default", nic_type=nic_type)],
        ),
    )
    compute(sim, "InstanceTemplatesClient").insert(project="p1", instance_template_resource=template).result()
    group = compute_v1.InstanceGroupManager(
        name=name,
        base_instance_name=name,
        instance_template=f"projects/p1/global/instanceTemplates/{name}-tpl",
        target_size=size,
    )
    groups = compute(sim, "InstanceGroupManagersClient")
    groups.insert(project="p1", zone=zone, instance_group_manager_resource=group).result()


def managed(sim, zone: str, name: str) -> list[tuple[str, str]]:
    items = compute(sim, "InstanceGroupManagersClient").list_managed_instances(
        project="p1", zone=zone, instance_group_manager=name
    )
    return [(i.instance_status, i.current_action) for i in items]


def region_usage(sim, region: str, metric: str) -> float:
    found = compute(sim, "RegionsClient").get(project="p1", region=region)
    return next(q.usage for q in found.quotas if q.metric == metric)


def errors(sim, zone: str, name: str) -> list[group_errors.GroupError]:
    return group_errors.GroupErrors("p1", zone, name, endpoint=sim.url).new()


def test_usage_grows_with_the_sims_vms_a_full_quota_refuses_the_next_and_a_resize_to_zero_frees_it(sim_of):
    sim = sim_of(regions={"europe-west4": {"quotas": {"PREEMPTIBLE_NVIDIA_L4_GPUS": {"limit": 2, "usage": 1}}}})
    assert region_usage(sim, "europe-west4", "PREEMPTIBLE_NVIDIA_L4_GPUS") == 1  # outside VMs only
    apply_group(sim, "europe-west4-b", "first", **L4_SPOT)
    sim.cloud.skip(30)
    assert managed(sim, "europe-west4-b", "first") == [("RUNNING", "NONE")]
    assert region_usage(sim, "europe-west4", "PREEMPTIBLE_NVIDIA_L4_GPUS") == 2
    assert region_usage(sim, "europe-west4", "G2_CPUS") == 8 + 8  # no PREEMPTIBLE_CPUS grant: G2's own quota

    apply_group(sim, "europe-west4-c", "second", **L4_SPOT)  # another zone, the same region's quota
    (refused,) = errors(sim, "europe-west4-c", "second")
    assert (refused.code, refused.message) == (
        "QUOTA_EXCEEDED",
        "Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded.  Limit: 2.0 in region europe-west4.",
    )
    assert group_errors.Problem(refused, "").kind == "quota"
    assert managed(sim, "europe-west4-c", "second") == [("", "CREATING")]  # listed, never created, retried

    compute(sim, "InstanceGroupManagersClient").resize(
        project="p1", zone="europe-west4-b", instance_group_manager="first", size=0
    )
    assert managed(sim, "europe-west4-b", "first") == [("STOPPING", "DELETING")]
    sim.cloud.skip(60 + 30)  # gone at 60 s; the second group's retry at 90 s finds the room, booted at 120 s
    assert managed(sim, "europe-west4-b", "first") == []
    assert managed(sim, "europe-west4-c", "second") == [("RUNNING", "NONE")]
    assert region_usage(sim, "europe-west4", "PREEMPTIBLE_NVIDIA_L4_GPUS") == 2


def test_a_dry_zone_lists_capacity_errors_mixed_as_the_scenario_says_until_its_window_ends(sim_of):
    sim = sim_of(
        zones={
            "europe-west4-a": {"outages": [{"start_s": 0, "end_s": 300}], "capacity_errors": ["UNSUPPORTED_OPERATION"]}
        }
    )
    apply_group(sim, "europe-west4-a", FR_GROUP, **L4_SPOT)
    sim.cloud.skip(240)  # a try at 0, 60, 120, 180, 240 s: all inside the window
    reader = group_errors.GroupErrors("p1", "europe-west4-a", FR_GROUP, endpoint=sim.url)
    codes = [e.code for e in reader.new()]
    assert codes == ["ZONE_RESOURCE_POOL_EXHAUSTED", "UNSUPPORTED_OPERATION"] * 2 + ["ZONE_RESOURCE_POOL_EXHAUSTED"]
    assert group_errors.group_running(_config(), "fr", "europe-west4-a", endpoint=sim.url) is False
    sim.cloud.skip(60 + 30)  # the window ends at 300 s: the try at 300 s creates the VM, booted 30 s later
    assert managed(sim, "europe-west4-a", FR_GROUP) == [("RUNNING", "NONE")]
    assert reader.new() == []  # each error is read once, and none came after the window
    assert group_errors.group_running(_config(), "fr", "europe-west4-a", endpoint=sim.url) is True


def test_an_on_demand_vm_finds_capacity_in_a_zone_dry_for_spot(sim_of):
    sim = sim_of()  # europe-west4-a is dry for Spot for an hour
    apply_group(sim, "europe-west4-a", "ondemand", **{**L4_SPOT, "spot": False})
    sim.cloud.skip(30)
    assert managed(sim, "europe-west4-a", "ondemand") == [("RUNNING", "NONE")]
    assert region_usage(sim, "europe-west4", "NVIDIA_L4_GPUS") == 1 + 1  # on-demand quota, not preemptible


def test_a_preemption_stops_the_vm_tells_its_metadata_and_the_group_recreates_it_once_capacity_is_back(sim_of):
    sim = sim_of(preemptions=[{"zone": "europe-west4-c", "at_s": 100, "outage_s": 200}])
    apply_group(sim, "europe-west4-c", FR_GROUP, **L4_SPOT)
    sim.cloud.skip(60)
    (vm,) = sim.cloud.groups[("zones/europe-west4-c", FR_GROUP)].instances
    metadata = MetadataClient(root=f"http://{sim.metadata_host(vm)}/computeMetadata/v1/", tries=1)
    assert metadata.get("instance/preempted") == "FALSE"
    assert metadata.attribute("trainstack-run-id") == FR_GROUP
    sim.cloud.skip(45)  # the preemption at 100 s
    assert managed(sim, "europe-west4-c", FR_GROUP) == [("STOPPING", "NONE")]
    assert metadata.get("instance/preempted") == "TRUE"
    sim.cloud.skip(60)
    assert managed(sim, "europe-west4-c", FR_GROUP) == [("TERMINATED", "RECREATING")]
    assert region_usage(sim, "europe-west4", "PREEMPTIBLE_NVIDIA_L4_GPUS") == 0  # a stopped VM holds no GPU
    assert {e.code for e in errors(sim, "europe-west4-c", FR_GROUP)} == {"ZONE_RESOURCE_POOL_EXHAUSTED"}
    assert group_errors.group_running(_config(), "fr", "europe-west4-c", endpoint=sim.url) is False
    sim.cloud.skip(200)  # capacity is back 200 s after the preemption: recreated at the next try, then booted
    assert managed(sim, "europe-west4-c", FR_GROUP) == [("RUNNING", "NONE")]
    assert metadata.get("instance/preempted") == "FALSE"  # the same name, a new VM
    assert group_errors.group_running(_config(), "fr", "europe-west4-c", endpoint=sim.url) is True


def test_a_long_poll_of_instance_preempted_answers_as_the_notice_flips_it_and_at_its_timeout_otherwise(sim_of):
    """The metadata server's wait_for_change with last_etag, through the agent's client over real HTTP."""
    import threading

    sim = sim_of(preemptions=[{"zone": "europe-west4-c", "at_s": 100, "outage_s": 200}])
    apply_group(sim, "europe-west4-c", FR_GROUP, **L4_SPOT)
    sim.cloud.skip(60)
    (vm,) = sim.cloud.groups[("zones/europe-west4-c", FR_GROUP)].instances
    metadata = MetadataClient(root=f"http://{sim.metadata_host(vm)}/computeMetadata/v1/", tries=1)
    value, etag = metadata.watch("instance/preempted")
    assert value == "FALSE" and etag
    assert metadata.watch("instance/preempted", etag, timeout_s=1) == ("FALSE", etag)  # nothing changed: timeout
    assert metadata.watch("instance/preempted", "stale-etag", timeout_s=30) == ("FALSE", etag)  # differs: at once
    answered = []
    poll = threading.Thread(target=lambda: answered.append(metadata.watch("instance/preempted", etag, timeout_s=30)))
    poll.start()
    sim.cloud.skip(45)  # the preemption at 100 s
    poll.join(timeout=10)
    assert answered and answered[0][0] == "TRUE" and answered[0][1] != etag
    assert metadata.watch("instance/nonexistent") == (None, None)


def test_a_zone_without_the_gpu_refuses_the_vm_and_the_quota_preflight_never_picks_it(sim_of, project):
    sim = sim_of(zones={"europe-west4-a": {"accelerators": ["nvidia-tesla-t4"]}})  # G2 machines, no L4
    apply_group(sim, "europe-west4-a", "nogpu", **L4_SPOT)
    (refused,) = errors(sim, "europe-west4-a", "nogpu")
    assert (refused.code, refused.message) == (
        "RESOURCE_NOT_FOUND",
        "The resource 'projects/p1/zones/europe-west4-a/acceleratorTypes/nvidia-l4' was not found",
    )
    decision = choose_zone(_config(), "fr", compute=ComputeQuotas("p1", endpoint=sim.url))
    assert decision.zone == "europe-west4-b"
    assert decision.rows[1].note.startswith("nvidia-l4 not offered in europe-west4-a")


def test_a_spot_only_machine_type_refuses_an_on_demand_vm_and_counts_spot_h100s_on_the_family_quota(sim_of):
    sim = sim_of(
        zones={"europe-west4-b": {"accelerators": ["nvidia-h100-80gb"], "machine_types": ["a3-highgpu-1g"]}},
        machine_types={"a3-highgpu-1g": {"vcpus": 26, "memory_mb": 239616, "gpus": {"nvidia-h100-80gb": 1}}},
        regions={
            "europe-west4": {
                "quotas": {"A3_CPUS": 208},
                "gpu_families": {"PREEMPTIBLE_GPUS_PER_GPU_FAMILY": {"NVIDIA_H100": 1}},
            }
        },
    )
    a3 = {"machine_type": "a3-highgpu-1g", "gpu": "nvidia-h100-80gb", "count": 1, "nic_type": "GVNIC"}
    apply_group(sim, "europe-west4-b", "ondemand", **a3, spot=False)
    (refused,) = errors(sim, "europe-west4-b", "ondemand")
    assert refused.code == "INVALID_FIELD_VALUE" and "SPOT or FLEX_START" in refused.message
    assert group_errors.Problem(refused, "").kind == "other"  # no other zone helps
    apply_group(sim, "europe-west4-b", "spot1", **a3, spot=True)
    apply_group(sim, "europe-west4-b", "spot2", **a3, spot=True)
    assert errors(sim, "europe-west4-b", "spot1") == []
    (short,) = errors(sim, "europe-west4-b", "spot2")
    assert short.message == "Quota 'PREEMPTIBLE_GPUS_PER_GPU_FAMILY' exceeded.  Limit: 1.0 in region europe-west4."
    # gVNIC is required on A3 (https://cloud.google.com/compute/docs/instances/create-vm-with-gvnic): a template
    # without it gets no VM, refused before its quota is looked at; G2 keeps VirtIO-Net (every other test here)
    apply_group(sim, "europe-west4-b", "virtio", **{**a3, "nic_type": None}, spot=True)
    (no_gvnic,) = errors(sim, "europe-west4-b", "virtio")
    assert no_gvnic.code == "INVALID_FIELD_VALUE" and "a3-highgpu-1g requires GVNIC" in no_gvnic.message


def test_the_billing_catalog_prices_a_vm_as_the_gcp_target_reads_it(sim_of):
    sim = sim_of()
    rates = pricing.rates_from_skus(pricing.fetch_skus(requests.Session(), sim.url))
    book = pricing.CatalogBook(read_at="now", rates=rates, shapes={"g2-standard-8": {"vcpus": 8, "memory_gib": 32}})
    on_demand, note = book.vm_per_hour("europe-west4", "g2-standard-8", "nvidia-l4", 1, spot=False)
    spot, _ = book.vm_per_hour("europe-west4", "g2-standard-8", "nvidia-l4", 1, spot=True)
    assert (on_demand, note) == (round(8 * 0.0273 + 32 * 0.0032 + 0.5886, 4), "")
    assert spot == round(8 * 0.0121 + 32 * 0.0014 + 0.3096, 4)


def _config(*sets: str):
    base = ["gcp.project=p1", "gcp.fallback_zones=[europe-west1-b, europe-west1-c]"]
    return Project.discover().load("dev", [*base, *sets])


def test_a_regional_group_lists_each_zone_refused_then_places_its_vms_in_the_first_zone_with_room(sim_of):
    from google.cloud import compute_v1

    dry = {"a": [{"start_s": 0, "end_s": 3600}], "b": [{"start_s": 0}], "c": [{"start_s": 0, "end_s": 120}]}
    sim = sim_of(zones={f"europe-west4-{z}": {"outages": windows} for z, windows in dry.items()})
    apply_group(sim, "europe-west4-c", "unused", **L4_SPOT, size=0)  # only for its template
    group = compute_v1.InstanceGroupManager(
        name="regional",
        base_instance_name="regional",
        instance_template="projects/p1/global/instanceTemplates/unused-tpl",
        target_size=2,
        distribution_policy=compute_v1.DistributionPolicy(
            zones=[compute_v1.DistributionPolicyZoneConfiguration(zone=f"zones/europe-west4-{z}") for z in "abc"]
        ),
    )
    regional = compute(sim, "RegionInstanceGroupManagersClient")
    regional.insert(project="p1", region="europe-west4", instance_group_manager_resource=group).result()
    refused = regional.list_errors(project="p1", region="europe-west4", instance_group_manager="regional")
    # each VM, in every zone (all dry at 0 s); europe-west4-b mixes UNSUPPORTED_OPERATION in (the scenario's)
    assert [(e.instance_action_details.instance.split("/")[3][-1], e.error.code[:4]) for e in refused] == [
        ("a", "ZONE"),
        ("b", "ZONE"),
        ("c", "ZONE"),
        ("a", "ZONE"),
        ("b", "UNSU"),
        ("c", "ZONE"),
    ]
    sim.cloud.skip(120 + 30)  # c has capacity from 120 s: the try at 120 s places both VMs there
    listed = regional.list_managed_instances(project="p1", region="europe-west4", instance_group_manager="regional")
    assert [(i.instance.split("/zones/")[1].split("/")[0], i.instance_status) for i in listed] == [
        ("europe-west4-c", "RUNNING"),
        ("europe-west4-c", "RUNNING"),
    ]


def test_the_vms_of_a_group_are_told_node_0s_rendezvous_on_this_host_on_a_port_of_their_own_group(sim_of):
    """On Compute Engine the nodes find node 0 by its instance name; every simulated VM is this host, so the
    metadata server tells them 127.0.0.1 and a port of their group's (two groups never share one)."""
    from trainer.launchers.vm.spec import RDZV_ATTRIBUTE, VmSpec

    sim = sim_of()
    apply_group(sim, "europe-west4-c", FR_GROUP, **L4_SPOT, size=2)
    apply_group(sim, "europe-west4-c", "other", **L4_SPOT, size=1)
    sim.cloud.skip(60)
    told = {}
    for group in sim.cloud.groups.values():
        for vm in group.instances:
            metadata = MetadataClient(root=f"http://{sim.metadata_host(vm)}/computeMetadata/v1/", tries=1)
            told[vm] = metadata.attribute(RDZV_ATTRIBUTE)
            assert RDZV_ATTRIBUTE in metadata.get("instance/attributes/").split("\n")
    ours = [told[vm] for vm in sim.cloud.groups[("zones/europe-west4-c", FR_GROUP)].instances]
    [theirs] = [told[vm] for vm in sim.cloud.groups[("zones/europe-west4-c", "other")].instances]
    assert ours[0] == ours[1] and ours[0].startswith("127.0.0.1:") and theirs != ours[0]
    # what the template does not say: the instance resource (the API's view) never carries it
    (vm,) = sim.cloud.groups[("zones/europe-west4-c", "other")].instances
    listed = compute(sim, "InstancesClient").get(project="p1", zone="europe-west4-c", instance=vm)
    assert RDZV_ATTRIBUTE not in {item.key for item in listed.metadata.items}
    assert VmSpec.__dataclass_fields__["rdzv_endpoint"].default is None  # Compute Engine: node 0 by name


def test_a_later_commands_simulated_storage_reads_what_an_earlier_one_kept(tmp_path, monkeypatch):
    """Each command starts its own Cloud Storage emulator on the env's folder; an object kept by an earlier one is
    read by its media link too (a conditional read: the metadata, then the media), not at the closed port."""
    from stacks.targets.gcp.sim.session import STORAGE_ENV, _storage_emulator
    from trainer.storage import open_bucket

    monkeypatch.setenv("TRAINSTACK_STORAGE_DEADLINE_S", "3")  # a dead link fails, not retried for 5 min
    for command in ("writes", "reads"):
        stops: list = []
        monkeypatch.setenv(STORAGE_ENV, _storage_emulator("gs://kept", tmp_path, stops))
        try:
            bucket = open_bucket("gs://kept")
            if command == "writes":
                bucket.write_bytes("fr/runs/r1/status.json", b"{}")
            else:
                assert bucket.read_versioned("fr/runs/r1/status.json")[0] == b"{}"
        finally:
            for stop in stops:
                stop()


def test_a_stage_triggered_preemption_counts_only_what_the_vms_own_boot_trained(tmp_path, monkeypatch):
    """A resumed run's log and status already hold the epochs an earlier VM trained, and the new trainer's start
    writes that status again as RUNNING: the preemption due at epoch 2 of the LM fine-tuning waits until this VM
    trains it (read from the log's appended pieces, as the trainer writes them), rather than taking it at boot."""
    from stacks.targets.gcp.sim.quotas import VmShape
    from stacks.targets.gcp.sim.session import STORAGE_ENV, _storage_emulator
    from stacks.targets.gcp.sim.vms import VmRunner
    from trainer.launchers.market import Preemption
    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    stops: list = []
    monkeypatch.setenv(STORAGE_ENV, _storage_emulator("gs://runs", tmp_path, stops))
    try:
        bucket = open_bucket("gs://runs")
        log = "fr/runs/r1/log.txt"
        earlier = RunStatus(run_id="r1", lang="fr", env="gcp-sim", state="RUNNING", stage="lm_finetune", epoch=2)
        write_status(bucket, earlier)
        bucket.write_bytes(log, b"2026-11-29T00:00:00Z == stage lm_finetune\n")  # sealed whole by the earlier VM
        bucket.append(log, b"2026-11-29T00:00:01Z lm_finetune [1/1] epoch 2/3  train_loss 4.1\n")
        meta = {"trainstack-bucket": "gs://runs", "trainstack-lang": "fr", "trainstack-run-id": "r1"}
        vm = Instance("vm-1", "europe-west4-a", VmShape("g2-standard-8", {"nvidia-l4": 1}, True, 100, "", meta), 1)
        runner = VmRunner(SimCloud(load_scenario()), "http://127.0.0.1:9", str, tmp_path)
        due = Preemption(zone="europe-west4-a", stage="lm_finetune", epoch=2)
        runner.booted(vm)
        write_status(bucket, dataclasses.replace(earlier, resumed=1))  # the new trainer's start: RUNNING again
        assert not due.due(0, runner.log_of(vm))  # the earlier VM's epochs are not this one's
        bucket.append(log, b"2026-11-29T01:00:00Z == stage lm_finetune\n")
        assert not due.due(0, runner.log_of(vm))
        bucket.append(log, b"2026-11-29T01:00:09Z lm_finetune [1/1] epoch 2/3  train_loss 3.9\n")
        assert due.due(0, runner.log_of(vm))
    finally:
        for stop in stops:
            stop()
