"""Does the trainer account hold what a run needs, as IAM evaluates it, conditions included?

The trainer's bucket access is granted by IAM conditions on object-name prefixes, and its
resize right on the project (stacks/constructs/trainer_identity.py). Reading the policies
would not say how Google evaluates them; Policy Troubleshooter v3 (`iam:troubleshoot`) does,
for one principal, resource and permission, evaluating conditional bindings from the
resource context passed with the request. Each probe is a read: nothing is created.
TRAINSTACK_POLICYTROUBLESHOOTER_ENDPOINT points it at recorded responses (tests).
"""
from __future__ import annotations

from dataclasses import dataclass

from stacks.config.models import EnvConfig
from stacks.errors import InfraError
from stacks.naming import TRAINER_SA, group_name, sa_email

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
        return {"accessTuple": {
            "principal": principal, "fullResourceName": self.full_resource_name, "permission": self.permission,
            "conditionContext": {"resource": {"service": self.service, "name": name, "type": self.resource_type}}}}


def _object(config: EnvConfig, key: str) -> str:
    path = config.bucket.split("://", 1)[1]
    bucket, _, base = path.partition("/")
    name = f"{base.strip('/')}/{key}" if base.strip("/") else key
    return f"//storage.googleapis.com/projects/_/buckets/{bucket}/objects/{name}"


def probes(config: EnvConfig, lang: str) -> list[Probe]:
    """What a run of `lang` needs, and one thing it must not have (the build contexts)."""
    obj = ("storage.googleapis.com", "storage.googleapis.com/Object")
    zone = config.zones[0] if config.zones else f"{config.region}-a"
    group = (f"//compute.googleapis.com/projects/{config.project}/zones/{zone}/instanceGroupManagers/"
             f"{group_name(config.env, lang)}")
    return [
        Probe(f"write {lang}/runs/", _object(config, f"{lang}/runs/doctor-probe/status.json"),
              "storage.objects.create", *obj, True),
        Probe(f"write {lang}/lm/", _object(config, f"{lang}/lm/doctor-probe/meta.json"),
              "storage.objects.create", *obj, True),
        Probe(f"read {lang}/data/", _object(config, f"{lang}/data/train.csv"), "storage.objects.get", *obj, True),
        Probe("no write to _cloudbuild/", _object(config, "_cloudbuild/doctor-probe.tgz"),
              "storage.objects.create", *obj, False),
        Probe(f"resize {group_name(config.env, lang)}", group, "compute.instanceGroupManagers.update",
              "compute.googleapis.com", "compute.googleapis.com/InstanceGroupManager", True),
    ]


def troubleshoot(session, base: str | None, body: dict) -> str:
    from stacks.gcp.image import _api_message, _call

    resp = _call(session, "POST", f"{base or API}/v3/iam:troubleshoot", "cannot ask Policy Troubleshooter",
                 json=body)
    if resp.status_code != 200:
        raise InfraError(f"Policy Troubleshooter answered HTTP {resp.status_code}: {_api_message(resp)}",
                         hint="enable policytroubleshooter.googleapis.com; you need Security Reviewer "
                              "(roles/iam.securityReviewer) on the organization to read the allow policies it "
                              "evaluates, and Deny Reviewer (roles/iam.denyReviewer) for deny policies "
                              "(https://cloud.google.com/policy-intelligence/docs/troubleshoot-access)")
    return resp.json().get("overallAccessState", "OVERALL_ACCESS_STATE_UNSPECIFIED")


def check_trainer_access(config: EnvConfig, lang: str) -> list:
    """One Check per probe: granted where a run needs it, refused on the build contexts."""
    from stacks.gcp.doctor import Check
    from stacks.gcp.image import _session

    principal = sa_email(TRAINER_SA, config.project)
    session, base = _session(ENDPOINT_ENV)
    checks = []
    for probe in probes(config, lang):
        state = troubleshoot(session, base, probe.body(principal))
        title = f"trainer account ({lang}): {probe.what}"
        wanted = GRANTED if probe.expect_access else DENIED
        if state == wanted:
            checks.append(Check(title, True, f"{probe.permission}: {state}"))
        elif state in (GRANTED, DENIED):
            fix = ("apply the foundation stack (it grants the trainer's prefixes; a new language needs it too)"
                   if probe.expect_access else
                   "the trainer account holds more than its prefixes: remove the broader grant on the bucket "
                   "or project (a build context could be planted)")
            checks.append(Check(title, False, f"{probe.permission} on {probe.full_resource_name}: {state}", fix))
        else:
            checks.append(Check(title, False, f"{probe.permission}: IAM could not decide ({state})",
                                "open the console's Policy Troubleshooter for this tuple; conditions on other "
                                "attributes than the resource name cannot be evaluated here"))
    return checks
