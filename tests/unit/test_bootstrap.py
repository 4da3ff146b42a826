"""`trainctl bootstrap` creates the state bucket through the real GCS client (emulator on 127.0.0.1)."""
from __future__ import annotations

from google.cloud import storage
from typer.testing import CliRunner

from stacks.cli.main import app

runner = CliRunner()


def test_bootstrap_creates_the_state_bucket_once(project, gcs_env):
    args = ["bootstrap", "--env", "dev", "--set", "project=p-boot", "--set", "state_bucket=boot-state"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "gs://boot-state created" in first.output and "cdktf deploy foundation" in first.output
    assert storage.Client(project="p-boot").lookup_bucket("boot-state") is not None
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "gs://boot-state exists" in again.output


def test_bootstrap_default_name_derives_from_project(project, gcs_env):
    result = runner.invoke(app, ["bootstrap", "--env", "dev", "--set", "project=acme-ml"])
    assert result.exit_code == 0, result.output
    assert "gs://acme-ml-trainstack-tfstate" in result.output


def test_bootstrap_on_local_env_is_bad_usage(project):
    result = runner.invoke(app, ["bootstrap", "--env", "local"])
    assert result.exit_code == 2
    assert "nothing to bootstrap" in result.output


def test_bootstrap_without_credentials_is_exit_3_with_the_login_hint(project, monkeypatch, tmp_path):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    result = runner.invoke(app, ["bootstrap", "--env", "dev", "--set", "project=p1"])
    assert result.exit_code == 3, result.output
    assert "gcloud auth application-default login" in result.output
