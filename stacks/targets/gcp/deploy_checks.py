"""`trainctl doctor` checks found by the first-deployment review: who pays for the provider's
calls, the NVIDIA driver the VMs will install, the firewall rule multi-node runs meet through.
Read-only, like the rest of doctor; the endpoints are overridable for recorded responses.
"""

from __future__ import annotations

from stacks.config.models import EnvConfig
from stacks.errors import InfraError
from stacks.naming import node_firewall_name, node_tag
from stacks.targets.checks import Check
from stacks.targets.gcp import api
from stacks.targets.gcp.gpus import IMAGE_MIN_DRIVER, default_boot_image, installs_driver_at_boot
from stacks.targets.gcp.lookups import RESOURCEMANAGER_API, RESOURCEMANAGER_ENDPOINT_ENV, lookup_failure, not_found

BILLING_PERMISSION = "serviceusage.services.use"


def check_billing_project(config: EnvConfig) -> Check:
    """The stacks' provider sets user_project_override + billing_project (foundation_stack.provider_settings):
    whoever plans needs serviceusage.services.use on the project, or every plan fails on its first call."""
    session, base = api.session(RESOURCEMANAGER_ENDPOINT_ENV)
    url = f"{base or RESOURCEMANAGER_API}/v1/projects/{config.gcp.project}:testIamPermissions"
    resp = api.call(
        session, "POST", url, "cannot test your permissions on the project", json={"permissions": [BILLING_PERMISSION]}
    )
    name = "provider billing project"
    if resp.status_code != 200:
        raise InfraError(
            f"Resource Manager answered HTTP {resp.status_code}: {api.api_message(resp)}",
            hint="check `gcloud auth application-default login` and the project id",
        )
    if BILLING_PERMISSION in resp.json().get("permissions", []):
        return Check(
            name,
            True,
            f"the provider bills its calls to {config.gcp.project} (user_project_override); "
            f"you hold {BILLING_PERMISSION}",
        )
    return Check(
        name,
        False,
        f"you lack {BILLING_PERMISSION} on {config.gcp.project}: the provider bills its calls "
        "there (user_project_override), so a plan fails at the quota data source",
        f"gcloud projects add-iam-policy-binding {config.gcp.project} --member=user:YOU "
        "--role=roles/serviceusage.serviceUsageConsumer",
    )


def check_drivers(config: EnvConfig) -> list[Check]:
    """The driver each language's VMs get against the image's CUDA 13 (driver >= 580)."""
    checks = []
    for lang, s in config.languages.items():
        image = s.gcp.boot_image or default_boot_image(s.gcp.machine_type)
        name = f"NVIDIA driver ({lang})"
        if not installs_driver_at_boot(image):
            checks.append(
                Check(
                    name,
                    True,
                    f"{image} brings its own: it must be >= {IMAGE_MIN_DRIVER} with Docker and "
                    "the NVIDIA container toolkit (the VM agent fails the run at once otherwise)",
                )
            )
        elif s.gcp.gpu_driver == "default":
            checks.append(
                Check(
                    name,
                    False,
                    "gpu_driver: default installs the COS milestone's default driver, which "
                    f"may be older than the {IMAGE_MIN_DRIVER} the image's CUDA 13 needs "
                    "(the run would then fail on its VM)",
                    f"set gcp.gpu_driver: latest (or R{IMAGE_MIN_DRIVER}) for {lang}",
                )
            )
        else:
            checks.append(
                Check(
                    name,
                    True,
                    f"cos-extensions installs {s.gcp.gpu_driver} (>= {IMAGE_MIN_DRIVER} needed; "
                    "the VM agent checks it before training)",
                )
            )
    return checks


def check_node_firewall(config: EnvConfig, firewalls=None) -> Check:
    """Multi-node languages meet through the foundation's rule between tagged training VMs.

    Only the VPC rule is checked here: the host firewall of a Container-Optimized OS VM exists
    at boot only, and images/trainer/startup.sh opens it there.
    """
    name = "firewall between nodes"
    many = sorted(lang for lang, s in config.languages.items() if s.nodes > 1)
    if not many:
        return Check(name, True, "no language runs on several VMs")
    rule = node_firewall_name(config.env)
    firewalls = firewalls or api.compute_client("FirewallsClient")
    try:
        found = firewalls.get(project=config.gcp.project, firewall=rule)
    except api.client_failures() as exc:
        if not_found(exc):
            return Check(
                name,
                False,
                f"no firewall rule {rule}: the nodes of {', '.join(many)} cannot reach each "
                "other on a network without default-allow-internal",
                f"apply the foundation (TRAINCTL_ENV={config.env} npx cdktf deploy foundation)",
            )
        return lookup_failure(exc, name, f"reading firewall rule {rule}", config)
    tag = node_tag(config.env)
    if tag not in list(found.target_tags) or tag not in list(found.source_tags):
        return Check(
            name,
            False,
            f"{rule} does not connect instances tagged {tag}",
            "apply the foundation again (the rule was changed by hand?)",
        )
    return Check(
        name,
        True,
        f"{rule} lets {tag} VMs of {', '.join(many)} reach each other through the VPC; "
        "on Container-Optimized OS, startup.sh opens each VM's host firewall to its subnet at boot",
    )
