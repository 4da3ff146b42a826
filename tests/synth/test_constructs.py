"""Construct-level synth tests: each construct alone in a stack, asserted with the CDK's Testing
(cdktf or cdktn, whichever stacks.cdk picked)."""

from __future__ import annotations

import json

from stacks import cdk
from stacks.cdk import TerraformStack
from stacks.targets.gcp.cdk_google import GoogleProvider
from stacks.targets.gcp.constructs.artifact_bucket import CHECKPOINT_SUFFIXES, ArtifactBucket
from stacks.targets.gcp.constructs.ci_identities import CiIdentities
from stacks.targets.gcp.constructs.container_registry import ContainerRegistry
from stacks.targets.gcp.constructs.github_federation import GithubFederation
from stacks.targets.gcp.constructs.gpu_instance_group import GpuInstanceGroup
from stacks.targets.gcp.constructs.project_services import APIS, ProjectServices
from stacks.targets.gcp.constructs.quota_guard import QuotaGuard, quota_id
from stacks.targets.gcp.constructs.trainer_identity import RESIZE_PERMISSIONS, TrainerIdentity
from tests.support.iam_conditions import condition_holds

PRIMITIVE = {"roles/owner", "roles/editor", "roles/viewer"}


def synth(build) -> tuple[str, dict]:
    """Synthesize `build(stack)` inside a bare stack; return the JSON text and the parsed document."""
    stack = TerraformStack(cdk.Testing.app(), "t")
    GoogleProvider(stack, "google", project="p1", region="europe-west4")
    build(stack)
    text = cdk.Testing.synth(stack)
    return text, json.loads(text)


def resources(doc: dict, kind: str) -> list[dict]:
    return list(doc.get("resource", {}).get(kind, {}).values())


def group(nodes: int, spot: bool = True, preconditions=None, compact_placement: bool = True, rung: str | None = None):
    def build(stack):
        GpuInstanceGroup(
            stack,
            "vms",
            project="p1",
            name="dev-train-fr",
            zone="europe-west4-b",
            machine_type="g2-standard-8",
            gpu_type="nvidia-l4",
            gpu_count=1,
            nodes=nodes,
            spot=spot,
            rung=rung,
            max_run_hours=6,
            boot_image="projects/x/global/images/family/y",
            disk_gb=150,
            disk_type="pd-ssd",
            service_account="sa@p1.iam.gserviceaccount.com",
            network="default",
            subnetwork=None,
            labels={"lang": "fr", "run": "r1"},
            metadata={"startup-script": "#!/bin/bash\n"},
            preconditions=preconditions,
            compact_placement=compact_placement,
        )

    return synth(build)


def test_doctor_requires_the_apis_the_foundation_enables():
    from stacks.targets.gcp.doctor import REQUIRED_APIS

    assert tuple(REQUIRED_APIS) == tuple(APIS)


def test_project_services_enable_every_api_and_never_disable_them():
    text, doc = synth(lambda s: ProjectServices(s, "services", project="p1"))
    services = resources(doc, "google_project_service")
    assert sorted(s["service"] for s in services) == sorted(f"{a}.googleapis.com" for a in APIS)
    assert {
        "compute",
        "storage",
        "artifactregistry",
        "iam",
        "logging",
        "cloudbuild",
        "cloudquotas",
        "iamcredentials",
        "sts",
    } <= set(APIS)
    assert all(s["disable_on_destroy"] is False for s in services)


def test_artifact_bucket_is_private_versioned_and_expires_old_versions_and_checkpoints():
    text, doc = synth(lambda s: ArtifactBucket(s, "artifacts", project="p1", name="b1", location="EUROPE-WEST4"))
    assert cdk.Testing.to_have_resource_with_properties(
        text,
        "google_storage_bucket",
        {
            "name": "b1",
            "uniform_bucket_level_access": True,
            "public_access_prevention": "enforced",
            "versioning": {"enabled": True},
        },
    )
    main = next(b for b in resources(doc, "google_storage_bucket") if b["name"] == "b1")
    conditions = [r["condition"] for r in main["lifecycle_rule"]]
    assert {"days_since_noncurrent_time": 30, "with_state": "ARCHIVED"} in conditions
    ckpt = next(c for c in conditions if "matches_suffix" in c)
    assert ckpt["matches_suffix"] == CHECKPOINT_SUFFIXES and ckpt["with_state"] == "LIVE"
    assert not any(".pth" == s or s == "model.pth" for s in ckpt["matches_suffix"])  # models are kept
    assert main["logging"]["log_bucket"].startswith("${google_storage_bucket.")
    assert all(b["public_access_prevention"] == "enforced" for b in resources(doc, "google_storage_bucket"))


def test_registry_is_docker_with_cleanup_that_keeps_recent_images():
    text, doc = synth(
        lambda s: ContainerRegistry(s, "registry", project="p1", location="europe-west4", repository_id="trainstack")
    )
    repo = resources(doc, "google_artifact_registry_repository")[0]
    assert repo["format"] == "DOCKER" and repo["docker_config"]["immutable_tags"] is True
    actions = {p["id"]: p["action"] for p in repo["cleanup_policies"]}
    assert actions["keep-recent"] == "KEEP" and actions["delete-untagged"] == "DELETE"


def _identities(stack):
    bucket = ArtifactBucket(stack, "artifacts", project="p1", name="b1", location="EU").bucket
    repo = ContainerRegistry(stack, "registry", project="p1", location="europe-west4", repository_id="r").repository
    trainer = TrainerIdentity(
        stack, "trainer", project="p1", env="dev", bucket=bucket, repository=repo, languages=["fr"]
    )
    ci = CiIdentities(stack, "ci", project="p1", state_bucket="p1-tfstate", trainer_account=trainer.account)
    GithubFederation(
        stack,
        "github",
        project="p1",
        repository="acme/trainstack",
        repository_id=101,
        repository_owner_id=202,
        planner=ci.planner,
        deployer=ci.deployer,
    )


def test_identities_are_least_privilege():
    text, doc = synth(_identities)
    project_roles = [m for m in resources(doc, "google_project_iam_member")]
    roles = {m["role"] for m in project_roles}
    assert not roles & PRIMITIVE
    assert not any(r.endswith((".admin", "Admin")) for r in roles), roles
    # The trainer reaches its languages' prefixes of its bucket only, and resizes its env's
    # groups only (tests/synth/test_policy.py evaluates the conditions).
    bucket_grants = resources(doc, "google_storage_bucket_iam_member")
    trainer_bucket = [g for g in bucket_grants if "trainer" in g["member"]]
    assert len(trainer_bucket) == 3 and all(g.get("condition") for g in trainer_bucket)
    assert not [g for g in bucket_grants if g["role"] == "roles/storage.objectAdmin"]
    role = next(r for r in resources(doc, "google_project_iam_custom_role") if r["role_id"] == "trainstackGroupResizer")
    assert role["permissions"] == RESIZE_PERMISSIONS
    assert "objectAdmin" not in json.dumps([m for m in project_roles])  # no project-wide storage grant
    # actAs on the trainer account only, for the deployer.
    act_as = [
        m for m in resources(doc, "google_service_account_iam_member") if m["role"] == "roles/iam.serviceAccountUser"
    ]
    assert len(act_as) == 1 and "deployer" in act_as[0]["member"]


def test_trainer_may_only_resize_its_environments_groups():
    text, doc = synth(_identities)
    role = next(r for r in resources(doc, "google_project_iam_custom_role") if r["role_id"] == "trainstackGroupResizer")
    assert role["permissions"] == ["compute.instanceGroupManagers.update"]  # what resize checks; no get, no create
    (resizer,) = [m for m in resources(doc, "google_project_iam_member") if "resize_role" in m["role"]]
    expression = resizer["condition"]["expression"]
    igm = "compute.googleapis.com/InstanceGroupManager"
    assert condition_holds(expression, igm, "projects/p1/zones/europe-west4-b/instanceGroupManagers/dev-train-fr")
    assert not condition_holds(expression, igm, "projects/p1/zones/europe-west4-b/instanceGroupManagers/prod-train-fr")
    assert not condition_holds(expression, igm, "projects/p1/zones/europe-west4-b/instanceGroupManagers/web")


def test_github_federation_trusts_one_repository_and_deploys_from_main_only():
    # The conditions themselves are evaluated on sample tokens in tests/test_workflows.py.
    text, doc = synth(_identities)
    provider = resources(doc, "google_iam_workload_identity_pool_provider")[0]
    assert provider["attribute_condition"].startswith(
        'assertion.repository_id == "101" && assertion.repository_owner_id == "202" && '
    )
    assert provider["oidc"]["issuer_uri"] == "https://token.actions.githubusercontent.com"
    wif = [
        (m["service_account_id"], m["member"])
        for m in resources(doc, "google_service_account_iam_member")
        if m["role"] == "roles/iam.workloadIdentityUser"
    ]
    planner = [member for account, member in wif if "planner" in account]
    deployer = sorted(
        member.split("/attribute.repository_event_ref/")[1] for account, member in wif if "deployer" in account
    )
    assert len(planner) == 1 and planner[0].startswith(
        "principalSet://iam.googleapis.com/${google_iam_workload_identity_pool."
    )
    assert planner[0].endswith("/attribute.repository_event/101:pull_request")
    assert deployer == [
        "101:push@refs/heads/main",
        "101:schedule@refs/heads/main",
        "101:workflow_dispatch@refs/heads/main",
    ]


def test_single_node_spot_group():
    text, doc = group(nodes=1)
    template = resources(doc, "google_compute_instance_template")[0]
    assert template["scheduling"] == {
        "provisioning_model": "SPOT",
        "preemptible": True,
        "automatic_restart": False,
        "on_host_maintenance": "TERMINATE",
        "instance_termination_action": "DELETE",
    }
    assert template["guest_accelerator"] == [{"type": "nvidia-l4", "count": 1}]
    assert template["disk"][0]["disk_size_gb"] == 150 and template["disk"][0]["disk_type"] == "pd-ssd"
    assert "access_config" not in template["network_interface"][0]  # no external IP
    assert template["shielded_instance_config"]["enable_vtpm"] is True
    assert template["shielded_instance_config"]["enable_secure_boot"] is False  # unsigned NVIDIA modules
    assert template["service_account"]["email"] == "sa@p1.iam.gserviceaccount.com"
    mig = resources(doc, "google_compute_instance_group_manager")[0]
    assert mig["target_size"] == 1 and mig["wait_for_instances"] is False
    # Node 0 resizes the group to 0 at the end; a later apply must not start it again.
    assert mig["lifecycle"]["ignore_changes"] == ["target_size"]
    assert mig["instance_lifecycle_policy"]["default_action_on_failure"] == "REPAIR"
    assert not resources(doc, "google_compute_resource_policy")
    assert not resources(doc, "google_compute_per_instance_config")


def test_multi_node_group_has_compact_placement_and_stable_names():
    text, doc = group(nodes=3)
    policy = resources(doc, "google_compute_resource_policy")[0]
    # best effort: no vm_count, so a Spot node the group recreates alone never waits for its peers
    assert policy["group_placement_policy"] == {"collocation": "COLLOCATED"}
    template = resources(doc, "google_compute_instance_template")[0]
    assert len(template["resource_policies"]) == 1
    assert template["resource_policies"][0].startswith("${google_compute_resource_policy.")
    configs = resources(doc, "google_compute_per_instance_config")
    assert sorted(c["name"] for c in configs) == ["dev-train-fr-0", "dev-train-fr-1", "dev-train-fr-2"]
    assert sorted(c["preserved_state"]["metadata"]["trainstack-rank"] for c in configs) == ["0", "1", "2"]
    # The configs create the named VMs (createInstances); a non-zero size would add random-named ones.
    mig = resources(doc, "google_compute_instance_group_manager")[0]
    assert mig["target_size"] == 0 and mig["lifecycle"]["ignore_changes"] == ["target_size"]


def test_compact_placement_can_be_turned_off():
    text, doc = group(nodes=2, compact_placement=False)
    assert not resources(doc, "google_compute_resource_policy")
    assert not resources(doc, "google_compute_instance_template")[0].get("resource_policies")
    assert len(resources(doc, "google_compute_per_instance_config")) == 2


def test_standard_provisioning_when_spot_is_off():
    text, doc = group(nodes=1, spot=False)
    scheduling = resources(doc, "google_compute_instance_template")[0]["scheduling"]
    assert scheduling["provisioning_model"] == "STANDARD" and scheduling["on_host_maintenance"] == "TERMINATE"
    assert "instance_termination_action" not in scheduling


def test_flex_start_group_starts_empty_and_one_resize_request_asks_for_every_node():
    text, doc = group(nodes=3, spot=False, rung="flex_start")
    template = resources(doc, "google_compute_instance_template")[0]
    assert template["scheduling"] == {
        "provisioning_model": "FLEX_START",
        "preemptible": False,
        "automatic_restart": False,
        "on_host_maintenance": "TERMINATE",
        "instance_termination_action": "DELETE",
        "max_run_duration": {"seconds": 6 * 3600},  # max_run_hours, within flex-start's seven days
    }
    assert template["reservation_affinity"] == {"type": "NO_RESERVATION"}
    (mig,) = resources(doc, "google_compute_instance_group_manager")
    assert mig["target_size"] == 0 and mig["instance_lifecycle_policy"]["default_action_on_failure"] == "DO_NOTHING"
    (request,) = resources(doc, "google_compute_resize_request")
    assert request["resize_by"] == 3 and request["zone"] == "europe-west4-b"
    (mig_id,) = doc["resource"]["google_compute_instance_group_manager"]
    assert request["instance_group_manager"] == f"${{google_compute_instance_group_manager.{mig_id}.name}}"
    # the request names its VMs: no per-instance configs
    assert not resources(doc, "google_compute_per_instance_config")
    # the pinned bindings' release is what the stack asks Terraform for (config checks refuse flex_start below 7.x)
    from stacks.targets.gcp.provider_release import bindings_release

    assert doc["terraform"]["required_providers"]["google"]["version"] == bindings_release()


def test_quota_guard_becomes_a_precondition_on_the_group():
    def build(stack):
        guard = QuotaGuard(
            stack,
            "quota",
            project="p1",
            region="europe-west4",
            metrics=["PREEMPTIBLE_NVIDIA_L4_GPUS", "NVIDIA_L4_GPUS"],
            needed=4,
        )
        GpuInstanceGroup(
            stack,
            "vms",
            project="p1",
            name="g",
            zone="europe-west4-b",
            machine_type="g2-standard-48",
            gpu_type="nvidia-l4",
            gpu_count=4,
            nodes=1,
            spot=True,
            boot_image="i",
            disk_gb=100,
            disk_type="pd-balanced",
            service_account="sa",
            network="default",
            subnetwork=None,
            labels={},
            metadata={},
            preconditions=[guard.precondition],
        )

    text, doc = synth(build)
    infos = sorted(doc["data"]["google_cloud_quotas_quota_info"].values(), key=lambda i: i["quota_id"])
    assert [i["quota_id"] for i in infos] == [
        "NVIDIA-L4-GPUS-per-project-region",
        "PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region",
    ]
    assert quota_id("PREEMPTIBLE_NVIDIA_L4_GPUS") == "PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region"
    assert all(i["service"] == "compute.googleapis.com" and i["parent"] == "projects/p1" for i in infos)
    lifecycle = resources(doc, "google_compute_instance_group_manager")[0]["lifecycle"]
    pre = lifecycle["precondition"][0]
    # Either metric may cover the request: Spot VMs use on-demand quota without Spot quota.
    assert pre["condition"].count(">= 4") == 2 and ") || (" in pre["condition"]
    assert "PREEMPTIBLE_NVIDIA_L4_GPUS or NVIDIA_L4_GPUS" in pre["error_message"]
    assert lifecycle["ignore_changes"] == ["target_size"]
    locals_ = list(doc["locals"].values())
    assert len(locals_) == 2 and all('"europe-west4"' in v and "dimensions_infos" in v for v in locals_)


def test_quota_guard_reads_the_family_quota_of_the_gpu_family():
    # H100/H200/B200 quota is one Cloud Quotas quota with a gpu_family dimension: the guard's limit is the
    # entry of this family (in the region, else its default), not another family's entry of the region.
    def build(stack):
        guard = QuotaGuard(
            stack,
            "quota",
            project="p1",
            region="europe-west4",
            metrics=["PREEMPTIBLE_GPUS_PER_GPU_FAMILY"],
            needed=8,
            gpu_family="NVIDIA_H100",
        )
        GpuInstanceGroup(
            stack,
            "vms",
            project="p1",
            name="g",
            zone="europe-west4-b",
            machine_type="a3-highgpu-8g",
            gpu_type="nvidia-h100-80gb",
            gpu_count=8,
            nodes=1,
            spot=True,
            boot_image="i",
            disk_gb=100,
            disk_type="pd-balanced",
            service_account="sa",
            network="default",
            subnetwork=None,
            labels={},
            metadata={},
            preconditions=[guard.precondition],
        )

    _, doc = synth(build)
    (info,) = doc["data"]["google_cloud_quotas_quota_info"].values()
    assert info["quota_id"] == "PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region"
    (limit,) = doc["locals"].values()
    family = 'try(d.dimensions["gpu_family"], "") == "NVIDIA_H100"'
    assert limit.count(family) == 2 and limit.index(family) < limit.index('try(d.dimensions["gpu_family"], "") == ""')
    assert (
        "gpu_family NVIDIA_H100"
        in resources(doc, "google_compute_instance_group_manager")[0]["lifecycle"]["precondition"][0]["error_message"]
    )


def test_access_logs_can_be_delivered():
    text, doc = synth(lambda s: ArtifactBucket(s, "artifacts", project="p1", name="b1", location="EU"))
    grants = resources(doc, "google_storage_bucket_iam_member")
    assert [(g["role"], g["member"]) for g in grants] == [
        ("roles/storage.objectCreator", "group:cloud-storage-analytics@google.com")
    ]
    assert grants[0]["bucket"].startswith("${google_storage_bucket.artifacts_access_logs")
