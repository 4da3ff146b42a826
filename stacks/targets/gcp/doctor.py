"""`trainctl doctor`: read-only checks of a gcp environment, each ok or a problem with what to do.

Checked here: the APIs the stacks need are enabled, the trainer image exists, each
language's boot image family resolves (and the GPU catalogue accepts it for the machine
type), the VMs' subnetwork has Private Google Access in every region of `gcp.zones` and
`gcp.fallback_zones`, whoever plans may bill the provider's calls to the project, the NVIDIA
driver the VMs install, the firewall rule multi-node runs meet
through (stacks/targets/gcp/deploy_checks.py), the organisation policies that
break a first apply (Shielded VM, domain restricted sharing) against the env's switches,
GPU quota (the preflight's own check), and the trainer and CI accounts' access as IAM evaluates
it, conditions included (stacks/targets/gcp/access.py, Policy Troubleshooter). Every call only reads,
with the user's credentials; TRAINSTACK_SERVICEUSAGE_ENDPOINT / TRAINSTACK_RESOURCEMANAGER_ENDPOINT /
TRAINSTACK_COMPUTE_ENDPOINT / TRAINSTACK_REGISTRY_ENDPOINT / TRAINSTACK_POLICYTROUBLESHOOTER_ENDPOINT
point them at recorded responses.
"""

from __future__ import annotations

from typing import Callable

from stacks.config.models import EnvConfig
from stacks.errors import InfraError
from stacks.targets.checks import Check
from stacks.targets.gcp import api
from stacks.targets.gcp.gpus import boot_image_problem, default_boot_image, region_of, signed_driver
from stacks.targets.gcp.lookups import RESOURCEMANAGER_API, RESOURCEMANAGER_ENDPOINT_ENV, lookup_failure, not_found

SERVICEUSAGE_ENDPOINT_ENV = "TRAINSTACK_SERVICEUSAGE_ENDPOINT"
SERVICEUSAGE_API = "https://serviceusage.googleapis.com"
# What the foundation enables (stacks/targets/gcp/constructs/project_services.py, kept equal by a test):
# importing it here would load cdktf for a read-only command.
REQUIRED_APIS = (
    "compute",
    "storage",
    "artifactregistry",
    "iam",
    "logging",
    "monitoring",
    "cloudbuild",
    "cloudquotas",
    "iamcredentials",
    "sts",
    "cloudresourcemanager",
    "serviceusage",
    "cloudbilling",
)
NOT_CHECKED = (
    "conditions on attributes other than the resource name (time, tags), and policies your own "
    "account cannot read (Security Reviewer / Deny Reviewer on the organization)"
)


def enabled_apis(project: str) -> set[str]:
    """Service names (compute.googleapis.com, ...) enabled on the project (Service Usage API)."""
    session, base = api.session(SERVICEUSAGE_ENDPOINT_ENV)
    url = f"{base or SERVICEUSAGE_API}/v1/projects/{project}/services"
    names, token = set(), ""
    while True:
        params = {"filter": "state:ENABLED", "pageSize": 200, **({"pageToken": token} if token else {})}
        resp = api.call(session, "GET", url, "cannot list the project's enabled APIs", params=params)
        if resp.status_code != 200:
            raise InfraError(
                f"Service Usage answered HTTP {resp.status_code}: {api.api_message(resp)}",
                hint="you need roles/serviceusage.serviceUsageViewer on the project",
            )
        body = resp.json()
        names |= {s["config"]["name"] for s in body.get("services", []) if s.get("config", {}).get("name")}
        token = body.get("nextPageToken", "")
        if not token:
            return names


def check_apis(config: EnvConfig) -> Check:
    enabled = enabled_apis(config.gcp.project)
    missing = [f"{a}.googleapis.com" for a in REQUIRED_APIS if f"{a}.googleapis.com" not in enabled]
    if missing:
        return Check(
            "APIs enabled",
            False,
            f"not enabled: {', '.join(missing)}",
            f"apply the foundation stack, or: gcloud services enable {' '.join(missing)} "
            f"--project {config.gcp.project}",
        )
    return Check("APIs enabled", True, f"{len(REQUIRED_APIS)} APIs the stacks use")


def check_image(config: EnvConfig) -> Check:
    from stacks.targets.gcp.image import image_exists, image_ref

    ref = image_ref(config)
    if image_exists(ref):
        return Check("trainer image", True, ref)
    return Check("trainer image", False, f"{ref} is not in the registry", f"trainctl image build --env {config.env}")


def check_boot_image(config: EnvConfig, lang: str, images=None) -> Check:
    """The language's boot image (family) resolves to a READY image the machine series accepts."""
    s = config.language(lang)
    image = s.gcp.boot_image or default_boot_image(s.gcp.machine_type)
    name = f"boot image ({lang}, {s.gcp.machine_type})"
    problem = boot_image_problem(s.gcp.machine_type, image)
    if problem:
        return Check(
            name, False, problem, "leave gcp.boot_image unset or pick an image from stacks/targets/gcp/catalogue.yaml"
        )
    parts = image.removeprefix("https://www.googleapis.com/compute/v1/").split("/")
    if len(parts) < 5 or parts[0] != "projects" or parts[2:4] not in (["global", "images"],):
        return Check(name, True, f"{image} (not a projects/P/global/images/... path: not looked up)")
    images = images or api.compute_client("ImagesClient")
    try:
        if parts[4] == "family" and len(parts) > 5:
            found = images.get_from_family(project=parts[1], family=parts[5])
        else:
            found = images.get(project=parts[1], image=parts[4])
    except api.client_failures() as exc:
        if not_found(exc):
            return Check(
                name,
                False,
                f"{image} does not resolve",
                "check the project and family name "
                f"(gcloud compute images describe-from-family ... --project {parts[1]})",
            )
        return lookup_failure(exc, name, f"looking up {image}", config)
    deprecated = getattr(getattr(found, "deprecated", None), "state", "") or ""
    if found.status != "READY" or deprecated in ("OBSOLETE", "DELETED"):
        return Check(
            name, False, f"{image} -> {found.name}: {found.status} {deprecated}".strip(), "pick a current image family"
        )
    return Check(name, True, f"{image} -> {found.name}")


def check_subnetwork(config: EnvConfig, region: str, subnetworks=None) -> Check:
    """The VMs have no external IP: their subnetwork in `gcp.region` needs Private Google Access."""
    network = config.gcp.network.rsplit("/", 1)[-1]  # an auto-mode network's subnetworks share its name
    link = config.gcp.subnetwork or f"projects/{config.gcp.project}/regions/{region}/subnetworks/{network}"
    parts = link.removeprefix("https://www.googleapis.com/compute/v1/").split("/")
    project, name = parts[1], parts[5]
    if config.gcp.subnetwork and parts[3] != region:
        zones = [z for z in [*config.gcp.zones, *config.gcp.fallback_zones] if region_of(z) == region]
        return Check(
            f"subnetwork ({region})",
            False,
            f"`gcp.subnetwork` is in {parts[3]}: VMs placed in {', '.join(zones) or region} need one in {region}",
            f"keep `gcp.zones` and `gcp.fallback_zones` in {parts[3]}, or leave `gcp.subnetwork` unset "
            "(an auto-mode network has a subnetwork in every region)",
        )
    subnetworks = subnetworks or api.compute_client("SubnetworksClient")
    title = f"subnetwork {name} ({region})"
    try:
        found = subnetworks.get(project=project, region=region, subnetwork=name)
    except api.client_failures() as exc:
        if not_found(exc):
            return Check(
                title,
                False,
                f"{link} does not exist (no `default` network in the project?)",
                "set `network:` and `subnetwork:` in the env (README, Google Cloud: organisation policies)",
            )
        return lookup_failure(exc, title, f"reading {link}", config)
    if not found.private_ip_google_access:
        return Check(
            title,
            False,
            f"Private Google Access is off in {region}: VMs without external IP cannot "
            "reach the bucket, the registry or the Compute API",
            f"gcloud compute networks subnets update "
            f"{name} --region {region} --project {project} --enable-private-ip-google-access",
        )
    return Check(title, True, "Private Google Access on")


def placement_regions(config: EnvConfig) -> list[str]:
    """Every region a run may be placed in: `gcp.region`, then those of `gcp.zones` and `gcp.fallback_zones`
    (the run lifecycle moves a run to a fallback zone of another region)."""
    return list(
        dict.fromkeys([config.gcp.region, *(region_of(z) for z in [*config.gcp.zones, *config.gcp.fallback_zones])])
    )


def effective_policy(project: str, constraint: str) -> dict:
    """The project's effective organisation policy for `constraint` (Resource Manager v1; a read)."""
    session, base = api.session(RESOURCEMANAGER_ENDPOINT_ENV)
    url = f"{base or RESOURCEMANAGER_API}/v1/projects/{project}:getEffectiveOrgPolicy"
    resp = api.call(
        session,
        "POST",
        url,
        f"cannot read the organisation policy {constraint}",
        json={"constraint": f"constraints/{constraint}"},
    )
    if resp.status_code != 200:
        raise InfraError(
            f"Resource Manager answered HTTP {resp.status_code} for {constraint}: {api.api_message(resp)}",
            hint="you need roles/orgpolicy.policyViewer (or orgpolicy.policy.get) on the project",
        )
    return resp.json()


def check_org_policies(config: EnvConfig) -> list[Check]:
    """Shielded VM and domain restricted sharing against `secure_boot` and `gcp.access_log_grant`."""
    checks = []
    shielded = effective_policy(config.gcp.project, "compute.requireShieldedVm").get("booleanPolicy", {})
    off = [
        lang
        for lang, s in config.languages.items()
        if not (
            s.gcp.secure_boot
            if s.gcp.secure_boot is not None
            else signed_driver(s.gcp.boot_image or default_boot_image(s.gcp.machine_type))
        )
    ]
    if shielded.get("enforced") and off:
        checks.append(
            Check(
                "org policy compute.requireShieldedVm",
                False,
                f"enforced, and Secure Boot is off for {', '.join(off)}",
                "set gcp.secure_boot: true for them (with a boot image whose NVIDIA driver is signed, e.g. "
                "Container-Optimized OS), or ask for an exception on the project",
            )
        )
    else:
        checks.append(
            Check(
                "org policy compute.requireShieldedVm",
                True,
                "enforced; every language boots with Secure Boot" if shielded.get("enforced") else "not enforced",
            )
        )
    domains = effective_policy(config.gcp.project, "iam.allowedPolicyMemberDomains").get("listPolicy", {})
    restricted = bool(domains.get("allowedValues")) or domains.get("allValues") == "DENY"
    if restricted and config.gcp.access_log_grant:
        checks.append(
            Check(
                "org policy iam.allowedPolicyMemberDomains",
                False,
                "domain restricted sharing refuses the access-log grant to group:cloud-storage-analytics@google.com",
                "set access_log_grant: false in the env (the bucket then gets no usage logs)",
            )
        )
    else:
        checks.append(
            Check(
                "org policy iam.allowedPolicyMemberDomains",
                True,
                "restricted; access_log_grant is off" if restricted else "not restricted",
            )
        )
    return checks


def check_quota(config: EnvConfig) -> list[Check]:
    """The preflight's quota decision per language, as if all runs were up at once."""
    from stacks.targets.gcp.quota import QuotaError, choose_zones

    checks = []
    for lang, d in choose_zones(config, list(config.languages)).items():
        if isinstance(d, QuotaError):
            checks.append(Check(f"GPU quota ({lang})", False, d.summary, d.hint or "trainctl quota"))
        else:
            checks.append(Check(f"GPU quota ({lang})", True, f"{d.needed} GPU(s) fit in {d.zone} ({d.metric})"))
    return checks


def run_checks(config: EnvConfig, echo: Callable[[Check], None]) -> list[Check]:
    """All checks, each reported as it completes; an API error becomes a problem line, not a crash."""
    from stacks.targets.gcp.access import check_ci_access, check_trainer_access
    from stacks.targets.gcp.deploy_checks import check_billing_project, check_drivers, check_node_firewall

    steps: list[tuple[str, Callable[[], Check | list[Check]]]] = [
        ("APIs enabled", lambda: check_apis(config)),
        ("trainer image", lambda: check_image(config)),
    ]
    steps += [(f"boot image ({lang})", lambda lang=lang: check_boot_image(config, lang)) for lang in config.languages]
    steps += [
        (f"subnetwork ({region})", lambda region=region: check_subnetwork(config, region))
        for region in placement_regions(config)
    ]
    steps += [
        ("provider billing project", lambda: check_billing_project(config)),
        ("NVIDIA drivers", lambda: check_drivers(config)),
        ("firewall between nodes", lambda: check_node_firewall(config)),
    ]
    steps += [("organisation policies", lambda: check_org_policies(config)), ("GPU quota", lambda: check_quota(config))]
    steps += [
        (f"trainer account ({lang})", lambda lang=lang: check_trainer_access(config, lang)) for lang in config.languages
    ]
    steps += [(f"CI accounts ({lang})", lambda lang=lang: check_ci_access(config, lang)) for lang in config.languages]
    checks = []
    for name, step in steps:
        try:
            found = step()
        except InfraError as exc:
            found = Check(name, False, exc.message, exc.hint or "")
        for check in found if isinstance(found, list) else [found]:
            echo(check)
            checks.append(check)
    return checks
