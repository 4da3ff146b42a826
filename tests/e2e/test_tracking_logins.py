"""Runs mirrored into an MLflow server with logins (MLflow's basic-auth app, tests/support/mlflow_server.py):
an account with rights on the run's experiment alone exports the run and its model there; a refused write
says what was refused where, and never leaves the MLflow run RUNNING.

The run is a staged one (tests/support/runs.py: tracked_run, a model.pth of bytes): nothing is trained here.
"""

from __future__ import annotations

import os

import pytest

from tests.support.mlflow_server import ADMIN, start_mlflow
from tests.support.project import make_project
from tests.support.runs import tracked_run

mlflow = pytest.importorskip(
    "mlflow",
    reason="the dev install brings mlflow (pyproject [dev]); the CLI alone has mlflow-skinny, which has no server",
)
pytest.importorskip("flask_wtf", reason="MLflow's basic-auth app needs mlflow[auth] (pyproject [dev])")

EXPERIMENT = "trainstack-local"
BUCKET = ".trainstack/local/bucket"
# Model.log's own POST that creates a logged model (not /logged-models/search, nor its artifacts)
CREATE_MODEL = r"^POST [^ ?]*/mlflow/logged-models(?:[ ?]|$)"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_mlflow(tmp_path_factory.mktemp("mlflow-logins"), logins=True)
    yield srv
    srv.stop()


def signed_in(monkeypatch, username: str, password: str | None = None) -> None:
    """MLflow's own variables: what trainctl and the test's client send from now on."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", username)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password or f"{username}-password-1234")


def as_admin(server, monkeypatch):
    signed_in(monkeypatch, *ADMIN)
    return mlflow.MlflowClient(tracking_uri=server.url)


def export(root, run_id: str, url: str):
    from typer.testing import CliRunner

    from stacks.cli.main import app

    here = os.getcwd()
    os.chdir(root)
    try:
        return CliRunner().invoke(app, ["runs", "export", "de", run_id, "--set", f"tracking.mlflow.uri={url}"])
    finally:
        os.chdir(here)


def staged(tmp_path, run_id: str):
    root = make_project(tmp_path / "proj")
    tracked_run(root / BUCKET, "de", run_id)
    return root


def mirrors(client, experiment_id: str, run_id: str) -> list:
    return client.search_runs([experiment_id], filter_string=f"tags.`trainstack.run_id` = '{run_id}'")


def test_an_account_with_rights_on_the_run_experiment_alone_exports_the_run_and_its_model_there(
    server, tmp_path, monkeypatch
):
    """Without the model's own experiment, MLflow logs it in "0" (Default): the account is refused there, and
    on a server without logins the run's page lists no model."""
    experiment_id = server.grant("alice", EXPERIMENT, "EDIT")
    run_id = "20261127-100000-b001"
    root = staged(tmp_path, run_id)
    signed_in(monkeypatch, "alice")
    r = export(root, run_id, server.url)
    assert r.exit_code == 0 and "1 created" in r.output, r.output

    client = as_admin(server, monkeypatch)
    [run] = mirrors(client, experiment_id, run_id)
    assert run.info.status == "FINISHED"
    [model] = client.search_logged_models([experiment_id])
    assert model.source_run_id == run.info.run_id and [o.model_id for o in run.outputs.model_outputs] == [
        model.model_id
    ]
    assert model.model_uri == run.data.tags["trainstack.model_uri"]
    assert client.search_logged_models(["0"]) == []
    # the run's source, not the exporting process's (a LOCAL source naming this venv's trainctl)
    assert model.tags["mlflow.source.type"] == "JOB" and model.tags["mlflow.source.name"] == "trainctl train de"
    assert model.tags["mlflow.source.git.commit"] == run.data.tags["mlflow.source.git.commit"] == "0123abc"

    client.delete_tag(run.info.run_id, "trainstack.source_sha")  # an export to complete: the model is found
    signed_in(monkeypatch, "alice")
    again = export(root, run_id, server.url)
    assert again.exit_code == 0 and "1 updated" in again.output, again.output
    assert [m.model_id for m in as_admin(server, monkeypatch).search_logged_models([experiment_id])] == [model.model_id]


def test_a_refused_write_says_what_and_where_and_leaves_no_run_running(server, tmp_path, monkeypatch):
    """An account that may only read the experiment cannot create the run; one refused the model after the
    run exists leaves the run ended as the bucket has it, and the next export logs the model once."""
    experiment_id = server.grant("bob", EXPERIMENT, "READ")
    run_id = "20261127-100000-b002"
    root = staged(tmp_path, run_id)
    signed_in(monkeypatch, "bob")
    r = export(root, run_id, server.url)
    assert r.exit_code == 3, r.output
    said = " ".join(r.output.split())
    assert f"refused (403) creating the run of de {run_id} in experiment '{EXPERIMENT}'" in said, r.output
    assert f"trainctl runs export de {run_id}" in said
    assert mirrors(as_admin(server, monkeypatch), experiment_id, run_id) == []

    server.grant("carol", EXPERIMENT, "EDIT")
    server.proxy.add("status", CREATE_MODEL, status=403, reply="Permission denied")  # as the app answers
    signed_in(monkeypatch, "carol")
    try:
        r = export(root, run_id, server.proxy.url)
    finally:
        server.proxy.clear()
    assert r.exit_code == 3, r.output
    said = " ".join(r.output.split())
    assert "refused (403) logging the model of run " in said, r.output
    assert f"(de {run_id}) in experiment '{EXPERIMENT}'" in said
    client = as_admin(server, monkeypatch)
    [run] = mirrors(client, experiment_id, run_id)
    assert run.info.status == "FINISHED" and "trainstack.model_uri" not in run.data.tags

    signed_in(monkeypatch, "carol")
    done = export(root, run_id, server.url)
    assert done.exit_code == 0 and "1 updated" in done.output, done.output
    client = as_admin(server, monkeypatch)
    [run] = mirrors(client, experiment_id, run_id)
    [model] = client.search_logged_models([experiment_id], filter_string=f"source_run_id = '{run.info.run_id}'")
    assert run.data.tags["trainstack.model_uri"] == model.model_uri
