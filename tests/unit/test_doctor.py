"""`trainctl doctor` against recorded Service Usage, Artifact Registry and Compute responses on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.targets.gcp.doctor import REQUIRED_APIS
from stacks.targets.gcp.iam_grants import DEPLOYER_PERMISSIONS
from tests.support.recorded_api import FIXTURES, RecordedApi

runner = CliRunner()
SETS = [
    "gcp.project=p1",
    "ci.github_repository=acme/trainstack",
    "ci.github_repository_id=101",
    "ci.github_repository_owner_id=202",
]
SERVICES = "/v1/projects/p1/services"
MANIFEST = "/v2/p1/trainstack/trainer/manifests/[^/]+"
COS_FAMILY = "/compute/v1/projects/cos-cloud/global/images/family/cos-stable"
DLVM = "projects/deeplearning-platform-release/global/images/family/common-cu129-ubuntu-2204-nvidia-580"
SUBNET = "/compute/v1/projects/p1/regions/europe-west4/subnetworks/default"
ORG_POLICY = "/v1/projects/p1:getEffectiveOrgPolicy"
PROJECT = "/compute/v1/projects/p1"
REGION = PROJECT + "/regions/europe-west4"
ACCEL = PROJECT + "/zones/[^/]+/acceleratorTypes/nvidia-l4"
TROUBLESHOOT = "/v3/iam:troubleshoot"
TEST_PERMISSIONS = "/v1/projects/p1:testIamPermissions"
FIREWALL = PROJECT + "/global/firewalls/trainstack-dev-trainer-nodes"


def ci_grants(principal: str, resource: str, permission: str) -> bool:
    """What the foundation grants the CI accounts (stacks/targets/gcp/iam_grants.py), as IAM would answer."""
    if principal.startswith("trainstack-ci-plan@"):
        return permission.endswith((".get", ".list"))
    read_runs = permission == "storage.objects.get" and "/runs/" in resource
    train_state = "/objects/dev/train-" in resource
    return (
        permission in DEPLOYER_PERMISSIONS
        or permission == "iam.serviceAccounts.actAs"
        or read_runs
        or (permission.startswith("storage.objects.") and train_state)
    )


def iam(granted=lambda resource, permission: "_cloudbuild/" not in resource, state=None, ci=ci_grants):
    """Policy Troubleshooter v3 answers per access tuple: CAN_ACCESS where `granted` (the trainer account)
    or `ci` (the CI accounts) says so, else CANNOT_ACCESS."""

    def answer(body: dict):
        t = body["accessTuple"]
        if t["principal"].startswith("trainstack-ci-"):
            allowed = ci(t["principal"], t["fullResourceName"], t["permission"])
        else:
            allowed = granted(t["fullResourceName"], t["permission"])
        decided = state or ("CAN_ACCESS" if allowed else "CANNOT_ACCESS")
        return 200, {"accessTuple": t, "overallAccessState": decided}

    return answer


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / "compute" / name).read_text())


def services(names) -> dict:
    return {
        "services": [{"name": f"projects/123/services/{n}", "config": {"name": n}, "state": "ENABLED"} for n in names]
    }


def image(name: str, status: str = "READY", deprecated: str | None = None) -> dict:
    body = {"kind": "compute#image", "name": name, "status": status, "family": "cos-stable", "architecture": "X86_64"}
    if deprecated:
        body["deprecated"] = {"state": deprecated}
    return body


def no_l4_quota() -> dict:
    region = fixture("region_europe-west4.json")
    region["quotas"] = [q for q in region["quotas"] if "L4" not in q["metric"]]
    region["quotas"] += [
        {"metric": m, "limit": 0, "usage": 0} for m in ("NVIDIA_L4_GPUS", "PREEMPTIBLE_NVIDIA_L4_GPUS")
    ]
    return region


def healthy() -> dict:
    return {
        ("GET", SERVICES): (200, services(f"{a}.googleapis.com" for a in REQUIRED_APIS)),
        ("HEAD", MANIFEST): (200, {}),
        ("GET", COS_FAMILY): (200, image("cos-121-18867-199-88")),
        ("GET", SUBNET): (200, {"name": "default", "region": "europe-west4", "privateIpGoogleAccess": True}),
        # One path answers every constraint: each check reads its own field (booleanPolicy / listPolicy).
        ("POST", ORG_POLICY): (200, {"booleanPolicy": {}, "listPolicy": {"allValues": "ALLOW"}}),
        ("GET", PROJECT): (200, fixture("project_p1.json")),
        ("GET", REGION): (200, fixture("region_europe-west4.json")),
        ("GET", ACCEL): (200, fixture("accelerator_type_nvidia-l4.json")),
        ("POST", TROUBLESHOOT): (200, iam()),
        ("POST", TEST_PERMISSIONS): (200, {"permissions": ["serviceusage.services.use"]}),
        ("GET", FIREWALL): (
            200,
            {
                "name": "trainstack-dev-trainer-nodes",
                "sourceTags": ["trainstack-dev-trainer"],
                "targetTags": ["trainstack-dev-trainer"],
                "direction": "INGRESS",
            },
        ),
    }


def doctor(project, monkeypatch, routes, *sets):
    api = RecordedApi(routes).__enter__()
    for var in (
        "TRAINSTACK_SERVICEUSAGE_ENDPOINT",
        "TRAINSTACK_COMPUTE_ENDPOINT",
        "TRAINSTACK_REGISTRY_ENDPOINT",
        "TRAINSTACK_RESOURCEMANAGER_ENDPOINT",
        "TRAINSTACK_POLICYTROUBLESHOOTER_ENDPOINT",
    ):
        monkeypatch.setenv(var, api.url)
    try:
        args = [a for s in (*SETS, *sets) for a in ("--set", s)]
        result = runner.invoke(app, ["doctor", "--env", "dev", *args])
    finally:
        api.__exit__(None, None, None)
    return result, api, " ".join(result.output.split())


def test_all_ok(project, monkeypatch):
    result, api, text = doctor(project, monkeypatch, healthy())
    assert result.exit_code == 0, result.output
    assert text.count("ok ") >= 9 and "problem" not in text
    assert "boot image (fr, g2-standard-8): projects/cos-cloud/global/images/family/cos-stable -> cos-121" in text
    assert "GPU quota (fr): 1 GPU(s) fit in europe-west4-a" in text
    assert "org policy compute.requireShieldedVm: not enforced" in text
    assert "not checked: conditions on attributes other than the resource name" in text  # what it does not cover
    assert "CI planner (fr): no write to train-fr state: storage.objects.create: CANNOT_ACCESS" in text
    assert "CI deployer (en): create instance templates: compute.instanceTemplates.create: CAN_ACCESS" in text
    assert "CI deployer (fr): no VMs of its own: compute.instances.create: CANNOT_ACCESS" in text
    assert "trainer account (fr): write fr/runs/: storage.objects.create: CAN_ACCESS" in text
    assert "trainer account (en): no write to _cloudbuild/: storage.objects.create: CANNOT_ACCESS" in text
    assert "trainer account (fr): resize dev-train-fr: compute.instanceGroupManagers.update: CAN_ACCESS" in text
    # Read-only: GETs, plus reads that take a POST body (getEffectiveOrgPolicy, iam:troubleshoot, the capacity
    # advice the zones line asks for).
    assert {(s.method, s.path) for s in api.seen if s.method not in ("GET", "HEAD")} == {
        ("POST", ORG_POLICY),
        ("POST", TROUBLESHOOT),
        ("POST", TEST_PERMISSIONS),
        ("POST", "/compute/v1/projects/p1/regions/europe-west4/advice/capacity"),
        ("POST", "/compute/v1/projects/p1/regions/europe-west4/advice/capacityHistory"),
    }
    assert "zones fr: europe-west4-a, europe-west4-b, europe-west4-c (" in text and "no capacity advice (404" in text
    assert "provider billing project: the provider bills its calls to p1 (user_project_override)" in text
    assert "NVIDIA driver (fr): cos-extensions installs latest" in text
    assert "firewall between nodes: no language runs on several VMs" in text and not api.requests("GET", FIREWALL)
    tuples = [json.loads(s.body)["accessTuple"] for s in api.requests("POST", TROUBLESHOOT)]
    assert {t["principal"] for t in tuples} == {
        f"trainstack-{a}@p1.iam.gserviceaccount.com" for a in ("trainer", "ci-plan", "ci-deploy")
    }
    runs = next(t for t in tuples if t["fullResourceName"].endswith("/objects/fr/runs/doctor-probe/status.json"))
    # the conditions on object-name prefixes are evaluated from the resource context sent along
    assert runs["conditionContext"]["resource"] == {
        "service": "storage.googleapis.com",
        "type": "storage.googleapis.com/Object",
        "name": "projects/_/buckets/trainstack-dev-artifacts/objects/fr/runs/doctor-probe/status.json",
    }
    constraints = {json.loads(s.body)["constraint"] for s in api.requests("POST", ORG_POLICY)}
    assert constraints == {"constraints/compute.requireShieldedVm", "constraints/iam.allowedPolicyMemberDomains"}
    (listing,) = api.requests("GET", SERVICES)
    assert listing.query["filter"] == ["state:ENABLED"]


@pytest.mark.parametrize(
    "case, change, expected, fix",
    [
        (
            "api-off",
            lambda r: r.update({("GET", SERVICES): (200, services(["compute.googleapis.com"]))}),
            "APIs enabled: not enabled: storage.googleapis.com",
            "gcloud services enable storage.googleapis.com",
        ),
        (
            "no-image",
            lambda r: r.update({("HEAD", MANIFEST): (404, {})}),
            "is not in the registry",
            "trainctl image build --env dev",
        ),
        (
            "no-family",
            lambda r: r.pop(("GET", COS_FAMILY)),
            "projects/cos-cloud/global/images/family/cos-stable does not resolve",
            "describe-from-family",
        ),
        (
            "obsolete",
            lambda r: r.update({("GET", COS_FAMILY): (200, image("cos-old", deprecated="OBSOLETE"))}),
            "-> cos-old: READY OBSOLETE",
            "pick a current image family",
        ),
        (
            "no-pga",
            lambda r: r.update({("GET", SUBNET): (200, {"name": "default", "privateIpGoogleAccess": False})}),
            "Private Google Access is off",
            "--enable-private-ip-google-access",
        ),
        (
            "no-default-network",
            lambda r: r.pop(("GET", SUBNET)),
            "does not exist (no `default` network in the project?)",
            "set `network:` and `subnetwork:`",
        ),
        (
            "denied",
            lambda r: r.update({("GET", SERVICES): (403, {"error": {"code": 403, "message": "Permission denied"}})}),
            "Service Usage answered HTTP 403: Permission denied",
            "roles/serviceusage.serviceUsageViewer",
        ),
        (
            "shielded-vm",
            lambda r: r.update({("POST", ORG_POLICY): (200, {"booleanPolicy": {"enforced": True}})}),
            "compute.requireShieldedVm: enforced, and Secure Boot is off for en",
            "set gcp.secure_boot: true",
        ),
        (
            "domains",
            lambda r: r.update({("POST", ORG_POLICY): (200, {"listPolicy": {"allowedValues": ["C0abc"]}})}),
            "refuses the access-log grant",
            "set access_log_grant: false",
        ),
        (
            "org-policy-denied",
            lambda r: r.update({("POST", ORG_POLICY): (403, {"error": {"code": 403, "message": "no"}})}),
            "Resource Manager answered HTTP 403",
            "roles/orgpolicy.policyViewer",
        ),
        (
            "no-quota",
            lambda r: r.update({("GET", REGION): (200, no_l4_quota())}),
            "GPU quota (fr): no zone fits train-fr",
            "raise NVIDIA_L4_GPUS in europe-west4 to >= 1",
        ),
        (
            "prefix-not-granted",
            lambda r: r.update(
                {
                    ("POST", TROUBLESHOOT): (
                        200,
                        iam(lambda res, perm: "/objects/fr/lm/" not in res and "_cloudbuild/" not in res),
                    )
                }
            ),
            "trainer account (fr): write fr/lm/",
            "apply the foundation stack",
        ),
        (
            "too-broad",
            lambda r: r.update({("POST", TROUBLESHOOT): (200, iam(lambda res, perm: True))}),
            "_cloudbuild/doctor-probe.tgz: CAN_ACCESS",
            "a build context could be planted",
        ),
        (
            "undecided",
            lambda r: r.update({("POST", TROUBLESHOOT): (200, iam(state="UNKNOWN_CONDITIONAL"))}),
            "IAM could not decide (UNKNOWN_CONDITIONAL)",
            "Policy Troubleshooter",
        ),
        (
            "planner-writes",
            lambda r: r.update({("POST", TROUBLESHOOT): (200, iam(ci=lambda p, res, perm: True))}),
            "CI planner (fr): no write to train-fr state",
            "the planner account can write",
        ),
        (
            "deployer-role-missing",
            lambda r: r.update(
                {
                    ("POST", TROUBLESHOOT): (
                        200,
                        iam(
                            ci=lambda p, res, perm: (
                                ci_grants(p, res, perm) and perm != "compute.instanceTemplates.create"
                            )
                        ),
                    )
                }
            ),
            "CI deployer (fr): create instance templates",
            "apply the foundation stack",
        ),
        (
            "deployer-too-broad",
            lambda r: r.update(
                {
                    ("POST", TROUBLESHOOT): (
                        200,
                        iam(ci=lambda p, res, perm: ci_grants(p, res, perm) or "/objects/dev/foundation/" in res),
                    )
                }
            ),
            "CI deployer (fr): no write to the foundation state",
            "holds more than its custom role",
        ),
        (
            "troubleshooter-denied",
            lambda r: r.update({("POST", TROUBLESHOOT): (403, {"error": {"code": 403, "message": "no"}})}),
            "Policy Troubleshooter answered HTTP 403",
            "roles/iam.securityReviewer) on the organization",
        ),
        # Issue 38: the first-deployment checks.
        (
            "no-billing-permission",
            lambda r: r.update({("POST", TEST_PERMISSIONS): (200, {})}),
            "you lack serviceusage.services.use on p1",
            "--role=roles/serviceusage.serviceUsageConsumer",
        ),
        (
            "default-driver",
            lambda r: None,
            "gpu_driver: default installs the COS milestone's default driver",
            "set gcp.gpu_driver: latest (or R580) for fr",
        ),
        (
            "no-firewall",
            lambda r: r.pop(("GET", FIREWALL)),
            "no firewall rule trainstack-dev-trainer-nodes: the nodes of en cannot reach",
            "npx cdktf deploy foundation",
        ),
    ],
)
def test_each_problem_says_what_to_do_and_exits_3(project, monkeypatch, case, change, expected, fix):
    routes = healthy()
    change(routes)
    sets = {
        "shielded-vm": [
            "languages.en.gcp.machine_type=a2-highgpu-1g",
            "languages.en.gcp.gpu.type=nvidia-tesla-a100",
            f"languages.en.gcp.boot_image={DLVM}",
        ],  # a Deep Learning VM: Secure Boot off
        "default-driver": ["languages.fr.gcp.gpu_driver=default"],
        "no-firewall": ["languages.en.nodes=2"],
    }.get(case, [])
    result, _, text = doctor(project, monkeypatch, routes, *sets)
    assert result.exit_code == 3, result.output
    assert "problem" in text and expected in text and fix in text
    assert text.count("ok ") >= 3  # the other checks still ran


def test_ci_accounts_are_not_probed_without_a_ci_repository(project, monkeypatch):
    monkeypatch.setattr("tests.unit.test_doctor.SETS", ["gcp.project=p1"])
    result, api, text = doctor(project, monkeypatch, healthy())
    assert result.exit_code == 0, result.output
    assert "CI accounts (fr): not checked: ci.github_repository is unset" in text
    tuples = [json.loads(s.body)["accessTuple"] for s in api.requests("POST", TROUBLESHOOT)]
    assert {t["principal"] for t in tuples} == {"trainstack-trainer@p1.iam.gserviceaccount.com"}


def test_an_unsupported_boot_image_is_a_problem_without_a_lookup(project):
    from stacks.config import load_config
    from stacks.targets.gcp.doctor import check_boot_image

    dlvm = "projects/deeplearning-platform-release/global/images/family/common-cu129-ubuntu-2204-nvidia-580"
    config = load_config(project / "envs", "dev", SETS)
    # Config validation refuses this pair already; the doctor's own check must too (a config
    # loaded by an older trainctl, or a catalogue change).
    object.__setattr__(config.language("fr").gcp, "boot_image", dlvm)

    class NoLookups:
        def get_from_family(self, **kw):
            raise AssertionError("looked up")

    check = check_boot_image(config, "fr", images=NoLookups())
    assert not check.ok and "accelerator-optimized-machines#g2-limitations" in check.detail


def test_an_a3_language_looks_up_the_cos_121_lts_family(project):
    from stacks.config import load_config
    from stacks.targets.gcp.doctor import check_boot_image

    a3 = [
        "languages.fr.gcp.machine_type=a3-highgpu-8g",
        "languages.fr.gcp.gpu.type=nvidia-h100-80gb",
        "languages.fr.gcp.gpu.count=8",
    ]
    config = load_config(project / "envs", "dev", [*SETS, *a3])

    class Families:
        asked = []

        def get_from_family(self, **kw):
            self.asked.append(kw)
            return type("Image", (), {"name": "cos-121-18867-199-88", "status": "READY", "deprecated": None})()

    check = check_boot_image(config, "fr", images=Families())
    assert Families.asked == [{"project": "cos-cloud", "family": "cos-121-lts"}]
    assert check.ok and check.detail == "projects/cos-cloud/global/images/family/cos-121-lts -> cos-121-18867-199-88"


def test_a_fallback_region_without_private_google_access_is_a_problem_naming_it(project, monkeypatch):
    # A run may be moved to a fallback zone of another region: its VMs use that region's subnetwork.
    routes = healthy()
    routes[("GET", SUBNET.replace("europe-west4", "europe-west1"))] = (
        200,
        {"name": "default", "region": "europe-west1", "privateIpGoogleAccess": False},
    )
    result, api, text = doctor(project, monkeypatch, routes, "gcp.fallback_zones=[europe-west1-b]")
    assert result.exit_code == 3, result.output
    assert "ok subnetwork default (europe-west4): Private Google Access on" in text
    assert "problem subnetwork default (europe-west1): Private Google Access is off in europe-west1" in text
    assert "--region europe-west1 --project p1 --enable-private-ip-google-access" in text
    assert len(api.requests("GET", SUBNET)) == 1


def test_a_set_subnetwork_cannot_serve_a_fallback_region(project, monkeypatch):
    routes = healthy()
    routes[("GET", "/compute/v1/projects/p1/regions/europe-west4/subnetworks/train-eu")] = (
        200,
        {"name": "train-eu", "region": "europe-west4", "privateIpGoogleAccess": True},
    )
    result, api, text = doctor(
        project,
        monkeypatch,
        routes,
        "gcp.fallback_zones=[europe-west1-b]",
        "gcp.network=projects/p1/global/networks/train",
        "gcp.subnetwork=projects/p1/regions/europe-west4/subnetworks/train-eu",
    )
    assert result.exit_code == 3, result.output
    assert "ok subnetwork train-eu (europe-west4)" in text
    assert "problem subnetwork (europe-west1): `gcp.subnetwork` is in europe-west4" in text
    assert not api.requests("GET", ".*/regions/europe-west1/subnetworks/.*")


def test_a_local_env_has_its_own_checks(project):
    """The local target's doctor: what `trainctl train fr --env local` needs on this machine (CI's prerequisites)."""
    result = runner.invoke(app, ["doctor", "--env", "local"])
    out = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    for name in ("terraform: 1.", "node: /", "trainer packages: torch", "bucket file://"):
        assert f"ok {name}" in out, name
    assert "not checked: the data" in result.output


def test_a_local_env_without_terraform_or_node_is_exit_3_with_the_install_hints(project, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: neither tool is found
    result = runner.invoke(app, ["doctor", "--env", "local"])
    out = " ".join(result.output.split())
    assert result.exit_code == 3
    assert "problem terraform: not on PATH" in out and "install Terraform >= 1.5" in out
    assert "problem node: not on PATH" in out and "install Node.js 20" in out
    assert "ok trainer packages" in out  # the other checks still ran


def test_a_multi_node_language_finds_the_foundation_firewall_rule(project, monkeypatch):
    result, api, text = doctor(project, monkeypatch, healthy(), "languages.en.nodes=2")
    assert result.exit_code == 0, result.output
    assert "firewall between nodes: trainstack-dev-trainer-nodes lets trainstack-dev-trainer VMs of en reach" in text
    assert len(api.requests("GET", FIREWALL)) == 1
