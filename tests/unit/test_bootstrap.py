"""`trainctl bootstrap` creates the state bucket through the real GCS client (emulator on 127.0.0.1)."""

from __future__ import annotations

import json

import pytest
from google.cloud import storage
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.targets.gcp.doctor import REQUIRED_APIS
from tests.support.recorded_api import RecordedApi

runner = CliRunner()
SERVICES = "/v1/projects/{}/services"
BATCH_ENABLE = "/v1/projects/{}/services:batchEnable"


def service_usage(project: str, enabled: list[str], *, operation: list[dict] | None = None) -> RecordedApi:
    """Service Usage v1: the enabled services, batchEnable answering an operation, then its polls."""
    listing = {
        "services": [{"name": f"projects/123/services/{n}", "config": {"name": n}, "state": "ENABLED"} for n in enabled]
    }
    polls = iter(operation or [])
    return RecordedApi(
        {
            ("GET", SERVICES.format(project)): (200, listing),
            ("POST", BATCH_ENABLE.format(project)): (200, {"name": "operations/acf.p2-1", "done": False}),
            ("GET", "/v1/operations/acf.p2-1"): (200, lambda body: (200, next(polls))),
        }
    )  # each poll: the next


@pytest.fixture
def all_enabled(monkeypatch):
    with service_usage("p-boot", [f"{a}.googleapis.com" for a in REQUIRED_APIS]) as api:
        monkeypatch.setenv("TRAINSTACK_SERVICEUSAGE_ENDPOINT", api.url)
        yield api


def test_bootstrap_creates_the_state_bucket_once(project, gcs_env, all_enabled):
    args = ["bootstrap", "--env", "dev", "--set", "gcp.project=p-boot", "--set", "gcp.state_bucket=boot-state"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "gs://boot-state created" in first.output and "cdktf deploy foundation" in first.output
    assert storage.Client(project="p-boot").lookup_bucket("boot-state") is not None
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "gs://boot-state exists" in again.output and "every API the stacks use is on" in again.output
    assert not all_enabled.requests("POST", ".*")


def test_bootstrap_default_name_derives_from_project(project, gcs_env, monkeypatch):
    with service_usage("acme-ml", [f"{a}.googleapis.com" for a in REQUIRED_APIS]) as api:
        monkeypatch.setenv("TRAINSTACK_SERVICEUSAGE_ENDPOINT", api.url)
        result = runner.invoke(app, ["bootstrap", "--env", "dev", "--set", "gcp.project=acme-ml"])
    assert result.exit_code == 0, result.output
    assert "gs://acme-ml-trainstack-tfstate" in result.output


def test_bootstrap_enables_the_apis_that_are_off_and_waits_for_them(project, gcs_env, monkeypatch):
    # Issue 38: a first foundation apply enabled them itself and raced them (SERVICE_DISABLED, apply again).
    on = ["storage.googleapis.com", "compute.googleapis.com"]
    done = {"name": "operations/acf.p2-1", "done": True, "response": {"services": []}}
    with service_usage("p-boot", on, operation=[{"name": "operations/acf.p2-1", "done": False}, done]) as api:
        monkeypatch.setenv("TRAINSTACK_SERVICEUSAGE_ENDPOINT", api.url)
        monkeypatch.setattr("stacks.targets.gcp.services.time.sleep", lambda s: None)
        result = runner.invoke(app, ["bootstrap", "--env", "dev", "--set", "gcp.project=p-boot"])
        (enable,) = api.requests("POST", BATCH_ENABLE.format("p-boot"))
        polls = api.requests("GET", "/v1/operations/acf.p2-1")
    assert result.exit_code == 0, result.output
    asked = json.loads(enable.body)["serviceIds"]
    assert len(asked) == len(REQUIRED_APIS) - 2 and "cloudquotas.googleapis.com" in asked and not set(on) & set(asked)
    assert len(polls) == 2  # waited until the operation was done
    assert "APIs: enabled" in result.output and "cloudquotas.googleapis.com" in result.output


def test_bootstrap_on_local_env_is_bad_usage(project):
    result = runner.invoke(app, ["bootstrap", "--env", "local"])
    assert result.exit_code == 2
    assert "nothing to bootstrap" in result.output


def test_bootstrap_without_credentials_is_exit_3_with_the_login_hint(project, monkeypatch, tmp_path):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    result = runner.invoke(app, ["bootstrap", "--env", "dev", "--set", "gcp.project=p1"])
    assert result.exit_code == 3, result.output
    assert "gcloud auth application-default login" in result.output
