"""`trainctl train fr --env dev` on the gcp target against Compute Engine answers served on 127.0.0.1 (the real
google-cloud-compute client) and the GCS emulator; only Terraform is stood in for (the google provider cannot be
fetched here): it records each apply and destroy, and holds the stack's outputs as a real state would."""

from __future__ import annotations

import dataclasses

from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.runs import stack_ops
from stacks.runs.language_run import LanguageRun
from stacks.targets.gcp.image import REGISTRY_ENDPOINT_ENV
from stacks.targets.gcp.quota import ENDPOINT_ENV
from stacks.targets.gcp.target import GCP
from tests.support.project import SAMPLE

runner = CliRunner()
MANIFEST = "/v2/p1/trainstack/trainer/manifests/[^/]+"
COS_FAMILY = "/compute/v1/projects/cos-cloud/global/images/family/cos-stable"
LIST_ERRORS_ANY = "/compute/v1/projects/p1/zones/(?P<zone>[^/]+)/instanceGroupManagers/dev-train-fr/listErrors"
MANAGED_ANY = "/compute/v1/projects/p1/zones/[^/]+/instanceGroupManagers/dev-train-fr/listManagedInstances"
NO_ERRORS = {"kind": "compute#instanceGroupManagersListErrorsResponse", "items": []}


def list_errors(zone: str) -> str:
    return f"/compute/v1/projects/p1/zones/{zone}/instanceGroupManagers/dev-train-fr/listErrors"


def errors_of(*entries: tuple[str, str, str]) -> dict:
    """A listErrors answer of (zone, code, message) entries, in the shape Compute Engine sends."""
    return {
        "items": [
            {
                "instanceActionDetails": {
                    "action": "CREATING",
                    "instance": f"projects/p1/zones/{zone}/instances/dev-train-fr-{i:04d}",
                },
                "error": {"code": code, "message": message},
                "timestamp": f"2026-11-27T03:10:{i:02d}.521-08:00",
            }
            for i, (zone, code, message) in enumerate(entries)
        ]
    }


class FakeTerraform:
    """The training stack's Terraform as far as `train` drives it: its state (the run id and zone outputs)
    lives from an apply to the next destroy, across `train` invocations of one test."""

    binary = "terraform"

    def __init__(self):
        self.calls, self.state, self.zone = [], {}, None

    def outputs(self) -> dict:
        return dict(self.state)

    def apply(self, variables):
        self.calls.append(("apply", variables))
        self.state = {"run_id": variables["run_id"], "zone": self.zone}

    def destroy(self, variables=None):
        self.calls.append(("destroy", variables))
        self.state = {}


@dataclasses.dataclass
class GcpTrain:
    """One test's gcp world: the API server, Terraform's stand-in, the zone of each synth."""

    project: object
    monkeypatch: object
    api: object
    terraform: FakeTerraform = dataclasses.field(default_factory=FakeTerraform)
    zones: list = dataclasses.field(default_factory=list)
    spots: list = dataclasses.field(default_factory=list)
    on_apply: object = None

    def install(self, appear_s: float = 45 * 60) -> None:
        terraform, zones, spots = self.terraform, self.zones, self.spots

        others: dict[str, FakeTerraform] = {}  # the other languages' stacks (never applied here)

        def synth_and_init(proj, config, stack, echo, placements=None):
            out = proj.work_outdir(config.env) / "stacks" / stack
            out.mkdir(parents=True, exist_ok=True)
            (out / "cdk.tf.json").write_text("{}")
            if stack != "train-fr":
                return others.setdefault(stack, FakeTerraform())
            if placements:  # a stack synthesized for a run (destroy, gc and re-attach synthesize without one)
                zones.append(placements["fr"].zone)
                spots.append(config.language("fr").spot)
                terraform.zone = placements["fr"].zone
            return terraform

        apply = terraform.apply

        def apply_then_vm(variables):
            apply(variables)
            if self.on_apply is not None:
                self.on_apply(zones[-1], variables["run_id"])

        terraform.apply = apply_then_vm
        self.monkeypatch.setattr(stack_ops, "synth_and_init", synth_and_init)
        fast = dataclasses.replace(GCP, poll_s=0.05, capacity_retry=(0.01, 0.01), status_appear_timeout_s=appear_s)
        self.monkeypatch.setattr(LanguageRun, "target", property(lambda run: fast))  # the run's, for its whole life
        # a group that exists and has no VM (a test's own route, added before, answers first)
        self.api.routes.setdefault(("POST", MANAGED_ANY), (200, {}))
        self.api.routes[("HEAD", MANIFEST)] = (200, {})
        self.api.routes[("GET", COS_FAMILY)] = (
            200,
            {"kind": "compute#image", "name": "cos-121-18867-199-88", "status": "READY", "family": "cos-stable"},
        )

    def args(self, sets: list[str]) -> list[str]:
        return ["--env", "dev", "--set", "gcp.project=p1", *sets, "--set", "defaults.creation_error_minutes=0.01"]

    def push(self, sets: list[str]) -> None:
        assert runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr"), *self.args(sets)]).exit_code == 0

    def invoke(self, command: list[str], sets: list[str]):
        """A trainctl command with the API server up (started here when it is not yet)."""
        self.monkeypatch.setenv(ENDPOINT_ENV, self.api.url)
        self.monkeypatch.setenv(REGISTRY_ENDPOINT_ENV, self.api.url)
        return runner.invoke(app, [*command, *self.args(sets)])


def gcp_train(
    project, monkeypatch, api, sets: list[str], *, on_apply=None, spots: list | None = None, appear_s: float = 45 * 60
):
    """`trainctl train fr --env dev` against the recorded APIs, its Terraform stood in for -> (result,
    Terraform's calls, the zone of each synth)."""
    world = GcpTrain(project, monkeypatch, api, on_apply=on_apply)
    if spots is not None:
        world.spots = spots
    world.install(appear_s)
    world.push(sets)
    with api:
        result = world.invoke(["train", "fr"], sets)
    return result, world.terraform.calls, world.zones
