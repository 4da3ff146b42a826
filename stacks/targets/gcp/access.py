"""Do the trainer and CI accounts hold what they need, and no more, as IAM evaluates it?

The trainer's bucket access is granted by IAM conditions on object-name prefixes, and its
resize right by one on group names (stacks/targets/gcp/constructs/trainer_identity.py). Reading the policies
would not say how Google evaluates them; Policy Troubleshooter v3 (`iam:troubleshoot`) does,
for one principal, resource and permission, evaluating conditional bindings from the
resource context passed with the request. Each probe is a read: nothing is created. The CI
accounts (stacks/targets/gcp/constructs/ci_identities.py) are probed the same way: the planner reads state
and resources but writes nothing; the deployer writes its env's training-stack states and the
resources of its custom role, never the foundation's state or VMs of its own.
TRAINSTACK_POLICYTROUBLESHOOTER_ENDPOINT points it at recorded responses (tests).
"""

from __future__ import annotations

from dataclasses import dataclass

from stacks.config.models import EnvConfig
from stacks.errors import InfraError
from stacks.naming import (
    DEPLOYER_SA,
    FOUNDATION,
    PLANNER_SA,
    TRAINER_SA,
    group_name,
    sa_email,
    stack_name,
    state_prefix,
)
from stacks.targets.checks import Check
from stacks.targets.gcp import api

ENDPOINT_ENV = "TRAINSTACK_POLICYTROUBLESHOOTER_ENDPOINT"
API = "https://policytroubleshooter.googleapis.com"
GRANTED, DENIED = "CAN_ACCESS", "CANNOT_ACCESS"


@dataclass(frozen=True)
class Probe:
    """One access tuple and the answer a correct setup gives."""

    what: str
    full_resource_name: str
    permission: str
    service: str
    resource_type: str
    expect_access: bool

    def body(self, principal: str) -> dict:
        name = self.full_resource_name.split("/", 3)[3]  # //service/NAME: conditions see resource.name
        return {
            "accessTuple": {
                "principal": principal,
                "fullResourceName": self.full_resource_name,
                "permission": self.permission,
                "conditionContext": {"resource": {"service": self.service, "name": name, "type": self.resource_type}},
            }
        }


def _object(config: EnvConfig, key: str) -> str:
    path = config.bucket.split("://", 1)[1]
    bucket, _, base = path.partition("/")
    name = f"{base.strip('/')}/{key}" if base.strip("/") else key
    return f"//storage.googleapis.com/projects/_/buckets/{bucket}/objects/{name}"


def _group(config: EnvConfig, lang: str) -> str:
    zone = config.gcp.zones[0] if config.gcp.zones else f"{config.gcp.region}-a"
    return (
        f"//compute.googleapis.com/projects/{config.gcp.project}/zones/{zone}/instanceGroupManagers/"
        f"{group_name(config.env, lang)}"
    )


GROUP = ("compute.googleapis.com", "compute.googleapis.com/InstanceGroupManager")
OBJ = ("storage.googleapis.com", "storage.googleapis.com/Object")
PROJECT = ("cloudresourcemanager.googleapis.com", "cloudresourcemanager.googleapis.com/Project")


def probes(config: EnvConfig, lang: str) -> list[Probe]:
    """What a run of `lang` needs, and one thing it must not have (the build contexts)."""
    return [
        Probe(
            f"write {lang}/runs/",
            _object(config, f"{lang}/runs/doctor-probe/status.json"),
            "storage.objects.create",
            *OBJ,
            True,
        ),
        Probe(
            f"write {lang}/lm/",
            _object(config, f"{lang}/lm/doctor-probe/meta.json"),
            "storage.objects.create",
            *OBJ,
            True,
        ),
        Probe(f"read {lang}/data/", _object(config, f"{lang}/data/train.csv"), "storage.objects.get", *OBJ, True),
        Probe(
            "no write to _cloudbuild/",
            _object(config, "_cloudbuild/doctor-probe.tgz"),
            "storage.objects.create",
            *OBJ,
            False,
        ),
        Probe(
            f"resize {group_name(config.env, lang)}",
            _group(config, lang),
            "compute.instanceGroupManagers.update",
            *GROUP,
            True,
        ),
    ]


def _project(config: EnvConfig) -> str:
    return f"//cloudresourcemanager.googleapis.com/projects/{config.gcp.project}"


def _state(config: EnvConfig, stack: str) -> str:
    """The GCS backend's state object of a stack (`<prefix>/default.tfstate`)."""
    return (
        f"//storage.googleapis.com/projects/_/buckets/{config.gcp.state_bucket_name}/objects/"
        f"{state_prefix(config.env, stack)}/default.tfstate"
    )


def planner_probes(config: EnvConfig, lang: str) -> list[Probe]:
    """`terraform plan -lock=false` on pull requests: reads state and resources, writes nothing."""
    stack, project = stack_name(lang), _project(config)
    return [
        Probe(f"read {stack} state", _state(config, stack), "storage.objects.get", *OBJ, True),
        Probe(
            f"read {group_name(config.env, lang)}",
            _group(config, lang),
            "compute.instanceGroupManagers.get",
            *GROUP,
            True,
        ),
        Probe(f"no write to {stack} state", _state(config, stack), "storage.objects.create", *OBJ, False),
        Probe("no instance template creation", project, "compute.instanceTemplates.create", *PROJECT, False),
    ]


def deployer_probes(config: EnvConfig, lang: str) -> list[Probe]:
    """Applies and destroys `train-<lang>` from main: its custom role and its env's states only."""
    stack, project = stack_name(lang), _project(config)
    trainer = (
        f"//iam.googleapis.com/projects/{config.gcp.project}/serviceAccounts/{sa_email(TRAINER_SA, config.gcp.project)}"
    )
    return [
        Probe(f"write {stack} state", _state(config, stack), "storage.objects.create", *OBJ, True),
        Probe("create instance templates", project, "compute.instanceTemplates.create", *PROJECT, True),
        Probe(
            f"update {group_name(config.env, lang)}",
            _group(config, lang),
            "compute.instanceGroupManagers.update",
            *GROUP,
            True,
        ),
        Probe(
            "attach the trainer account to VMs",
            trainer,
            "iam.serviceAccounts.actAs",
            "iam.googleapis.com",
            "iam.googleapis.com/ServiceAccount",
            True,
        ),
        Probe(
            f"read {lang}/runs/ (gc)",
            _object(config, f"{lang}/runs/doctor-probe/status.json"),
            "storage.objects.get",
            *OBJ,
            True,
        ),
        Probe(f"no write to the {FOUNDATION} state", _state(config, FOUNDATION), "storage.objects.create", *OBJ, False),
        Probe("no VMs of its own", project, "compute.instances.create", *PROJECT, False),
    ]


def troubleshoot(session, base: str | None, body: dict) -> str:
    resp = api.call(
        session, "POST", f"{base or API}/v3/iam:troubleshoot", "cannot ask Policy Troubleshooter", json=body
    )
    if resp.status_code != 200:
        raise InfraError(
            f"Policy Troubleshooter answered HTTP {resp.status_code}: {api.api_message(resp)}",
            hint="enable policytroubleshooter.googleapis.com; you need Security Reviewer "
            "(roles/iam.securityReviewer) on the organization to read the allow policies it "
            "evaluates, and Deny Reviewer (roles/iam.denyReviewer) for deny policies "
            "(https://cloud.google.com/policy-intelligence/docs/troubleshoot-access)",
        )
    return resp.json().get("overallAccessState", "OVERALL_ACCESS_STATE_UNSPECIFIED")


def _evaluate(who: str, principal: str, probes_: list[Probe], missing_fix: str, extra_fix: str) -> list:
    """One Check per probe: the access each probe expects, as Policy Troubleshooter evaluates it."""
    session, base = api.session(ENDPOINT_ENV)
    checks = []
    for probe in probes_:
        state = troubleshoot(session, base, probe.body(principal))
        title = f"{who}: {probe.what}"
        wanted = GRANTED if probe.expect_access else DENIED
        if state == wanted:
            checks.append(Check(title, True, f"{probe.permission}: {state}"))
        elif state in (GRANTED, DENIED):
            checks.append(
                Check(
                    title,
                    False,
                    f"{probe.permission} on {probe.full_resource_name}: {state}",
                    missing_fix if probe.expect_access else extra_fix,
                )
            )
        else:
            checks.append(
                Check(
                    title,
                    False,
                    f"{probe.permission}: IAM could not decide ({state})",
                    "open the console's Policy Troubleshooter for this tuple; conditions on other "
                    "attributes than the resource name cannot be evaluated here",
                )
            )
    return checks


def check_trainer_access(config: EnvConfig, lang: str) -> list:
    """Granted where a run needs it, refused on the build contexts."""
    return _evaluate(
        f"trainer account ({lang})",
        sa_email(TRAINER_SA, config.gcp.project),
        probes(config, lang),
        "apply the foundation stack (it grants the trainer's prefixes; a new language needs it too)",
        "the trainer account holds more than its prefixes: remove the broader grant on the bucket "
        "or project (a build context could be planted)",
    )


def check_ci_access(config: EnvConfig, lang: str) -> list:
    """The planner reads only; the deployer holds its custom role's rights on its env, nothing beyond."""

    if not config.ci.github_repository:
        return [Check(f"CI accounts ({lang})", True, "not checked: ci.github_repository is unset (no CI identities)")]
    fix_missing = "apply the foundation stack (it creates the CI accounts and their grants)"
    return [
        *_evaluate(
            f"CI planner ({lang})",
            sa_email(PLANNER_SA, config.gcp.project),
            planner_probes(config, lang),
            fix_missing,
            "the planner account can write: remove the write grant (a pull request could change state or resources)",
        ),
        *_evaluate(
            f"CI deployer ({lang})",
            sa_email(DEPLOYER_SA, config.gcp.project),
            deployer_probes(config, lang),
            fix_missing,
            "the deployer holds more than its custom role and env: remove the broader grant "
            "(roles/editor, compute.instanceAdmin.v1, objectAdmin on the state bucket)",
        ),
    ]
