"""VM creation errors of a run's group (instanceGroupManagers.listErrors) while `trainctl train` waits:
recorded responses served on 127.0.0.1 to the real google-cloud-compute client, GCS through the emulator."""
from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.targets.gcp.group_errors import GroupErrors
from stacks.targets.gcp.image import REGISTRY_ENDPOINT_ENV
from stacks.targets.gcp.quota import ENDPOINT_ENV
from stacks.runs import runflow, stack_ops
from stacks.targets.gcp.target import GCP
from tests.support.compute_api import compute_api, fixture
from tests.support.project import SAMPLE
from tests.support.recorded_api import RecordedApi

runner = CliRunner()
LIST_ERRORS = "/compute/v1/projects/p1/zones/europe-west4-a/instanceGroupManagers/dev-train-fr/listErrors"
MANIFEST = "/v2/p1/trainstack/trainer/manifests/[^/]+"
COS_FAMILY = "/compute/v1/projects/cos-cloud/global/images/family/cos-stable"


def test_each_error_of_the_group_is_returned_once():
    with RecordedApi({("GET", LIST_ERRORS): (200, "compute/list_errors_zone_exhausted.json")}) as api:
        errors = GroupErrors("p1", "europe-west4-a", "dev-train-fr", endpoint=api.url)
        first, again = errors.new(), errors.new()
    (error,) = first
    assert again == []
    assert error.code == "ZONE_RESOURCE_POOL_EXHAUSTED" and error.instance.endswith("/dev-train-fr-x7k2")
    assert error.line().startswith("VM creation failed in europe-west4-a (dev-train-fr-x7k2): "
                                   "ZONE_RESOURCE_POOL_EXHAUSTED: The zone")


def test_a_group_not_created_yet_has_no_errors():
    with RecordedApi({("GET", LIST_ERRORS): (404, "compute/error_404_accelerator_type.json")}) as api:
        assert GroupErrors("p1", "europe-west4-a", "dev-train-fr", endpoint=api.url).new() == []


class FakeTerraform:
    """The training stack's Terraform as far as `train` drives it (the google provider cannot be fetched here)."""

    binary = "terraform"

    def __init__(self):
        self.calls = []

    def outputs(self) -> dict:
        return {}

    def apply(self, variables):
        self.calls.append(("apply", variables))

    def destroy(self, variables=None):
        self.calls.append(("destroy", variables))


@pytest.mark.parametrize(("recorded", "hint"), [
    ("list_errors_zone_exhausted.json", "fallback_zones"),
    ("list_errors_quota_exceeded.json", "iam-admin/quotas?project=p1"),
])
def test_train_prints_each_creation_error_once_then_destroys_the_stack_and_exits_3(
        project, gcs_env, monkeypatch, recorded, hint):
    args = ["--env", "dev", "--set", "project=p1", "--set", f"bucket=gs://test-bucket/creation-{recorded[:20]}",
            "--set", "defaults.creation_error_minutes=0.01"]
    assert runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr"), *args]).exit_code == 0
    api = compute_api()
    api.routes[("HEAD", MANIFEST)] = (200, {})
    api.routes[("GET", COS_FAMILY)] = (200, {"kind": "compute#image", "name": "cos-121-18867-199-88",
                                             "status": "READY", "family": "cos-stable"})
    api.routes[("GET", LIST_ERRORS)] = (200, fixture(recorded))
    terraform = FakeTerraform()

    def synth_and_init(proj, config, stack, echo, placements=None):
        out = proj.work_outdir(config.env) / "stacks" / stack
        out.mkdir(parents=True, exist_ok=True)
        (out / "cdk.tf.json").write_text("{}")
        return terraform

    monkeypatch.setattr(stack_ops, "synth_and_init", synth_and_init)
    monkeypatch.setattr(runflow, "target_of", lambda config: dataclasses.replace(GCP, poll_s=0.05))
    with api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        monkeypatch.setenv(REGISTRY_ENDPOINT_ENV, api.url)
        result = runner.invoke(app, ["train", "fr", *args])
    out = " ".join(result.output.split())
    assert result.exit_code == 3, result.output
    assert out.count("warning: VM creation failed in europe-west4-a (dev-train-fr-x7k2)") == 1  # once, polled again
    assert len(api.requests("GET", LIST_ERRORS)) >= 2
    assert "no VM of run" in out and hint in out
    (applied, destroyed) = terraform.calls
    assert applied[0] == "apply" and destroyed == ("destroy", applied[1])  # the stack it applied is torn down


def test_status_shows_the_group_errors_of_a_starting_run(project, gcs_env, monkeypatch):
    import json

    from trainer.runfiles.status_file import TRAINCTL_META, new_run_id, run_key
    from trainer.storage import open_bucket

    uri = "gs://test-bucket/creation-status"
    run_id = new_run_id()
    open_bucket(uri).write_bytes(run_key("fr", run_id, TRAINCTL_META), json.dumps({"zone": "europe-west4-a"}).encode())
    args = ["--env", "dev", "--set", "project=p1", "--set", f"bucket={uri}"]
    with RecordedApi({("GET", LIST_ERRORS): (200, "compute/list_errors_quota_exceeded.json")}) as api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        shown = runner.invoke(app, ["status", "fr", *args])
        as_json = runner.invoke(app, ["status", "fr", *args, "--json"])
    assert shown.exit_code == 0, shown.output
    out = " ".join(shown.output.split())
    assert "STARTING" in out and "VM creation errors (the group keeps retrying)" in out
    assert "QUOTA_EXCEEDED: Quota 'PREEMPTIBLE_CPUS' exceeded" in out and "iam-admin/quotas?project=p1" in out
    assert json.loads(as_json.output)["vm_errors"] == [
        "VM creation failed in europe-west4-a (dev-train-fr-x7k2): QUOTA_EXCEEDED: Quota 'PREEMPTIBLE_CPUS' "
        "exceeded.  Limit: 4.0 in region europe-west4."]
