"""Runs mirrored into a real MLflow tracking server (`mlflow server`, SQLite, local artifacts, 127.0.0.1):
export, the registry's alias, the pyfunc model, and a tracker that fails mid-export.

The run is the session's (tests/e2e/conftest.py `trained_fr`, whose `train` met a tracker that was down:
tests/e2e/test_lifecycle.py checks that line); copies of its folder with other figures give the registry a
worse and a better run without training again.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from stacks.tracking.record import epoch_end_times, read_mirror
from tests.support.fresh_python import load_in_a_fresh_interpreter
from tests.support.mlflow_server import start_mlflow
from tests.support.project import SAMPLE, make_project
from tests.support.runs import TRACKED_IMAGE, tracked_run, utc_ms, write
from tests.support.trainctl import run_dir
from trainer.storage import open_bucket

mlflow = pytest.importorskip(
    "mlflow",
    reason="the dev install brings mlflow (pyproject [dev]); the CLI alone has mlflow-skinny, which has no server",
)

EXPERIMENT = "trainstack-local"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_mlflow(tmp_path_factory.mktemp("mlflow"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, trained_fr):
    """A project of its own holding a copy of the session's trained French run (tests/e2e/conftest.py)."""
    source, run_id, _ = trained_fr
    root = make_project(tmp_path_factory.mktemp("tracking") / "proj")
    shutil.copytree(run_dir(source, "fr", run_id), run_dir(root, "fr", run_id))
    return root, run_id


def cli(root, *args: str):
    """trainctl in this process (typer's CliRunner), in the project's folder: no interpreter start per call."""
    from typer.testing import CliRunner

    from stacks.cli.main import app

    here = os.getcwd()
    os.chdir(root)
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        os.chdir(here)


def sets(server, url: str | None = None) -> list[str]:
    return ["--set", f"tracking.mlflow.uri={url or server.url}"]


def client(server):
    return mlflow.MlflowClient(tracking_uri=server.url, registry_uri=server.url)


def mirrored(server, run_id: str | None = None) -> list:
    exp = client(server).get_experiment_by_name(EXPERIMENT)
    if exp is None:
        return []
    flt = f"tags.`trainstack.run_id` = '{run_id}'" if run_id else ""
    return client(server).search_runs([exp.experiment_id], filter_string=flt, max_results=1000)


def history_lengths(server, mlflow_run) -> dict[str, int]:
    return {key: len(client(server).get_metric_history(mlflow_run.info.run_id, key)) for key in mlflow_run.data.metrics}


def test_export_mirrors_a_run_once_however_often_it_runs(server, trained):
    root, run_id = trained
    assert mirrored(server, run_id) == []
    r = cli(root, "runs", "export", "fr", run_id, *sets(server))
    assert r.exit_code == 0, r.output
    assert "1 created, 0 updated, 0 unchanged" in r.output
    [run] = mirrored(server, run_id)
    metrics = json.loads((run_dir(root, "fr", run_id) / "metrics.json").read_text())
    tags, params, values = run.data.tags, run.data.params, run.data.metrics
    assert (
        tags["trainstack.lang"] == "fr" and tags["trainstack.env"] == "local" and tags["trainstack.job"] == "classifier"
    )
    assert tags["trainstack.run_url"].endswith(f"/fr/runs/{run_id}") and len(tags["trainstack.git_sha"]) >= 7
    assert tags["trainstack.base_lm"] == metrics["base_lm"]["id"] and tags["trainstack.kept"] == metrics["kept"]
    assert params["epochs_clf"] == "2" and params["n_train"] == str(metrics["n_train"]) and params["data_hash"]
    assert values["macro_f1"] == pytest.approx(metrics["macro_f1"]) and "tfidf/macro_f1" in values
    assert all(f"f1/{label}" in values for label in metrics["labels"])
    assert run.info.status == "FINISHED" and run.info.end_time
    epochs = client(server).get_metric_history(run.info.run_id, "classifier/valid_loss")
    assert len(epochs) == sum(1 for h in metrics["history"] if h["stage"] == "classifier")
    files = {f.path for f in client(server).list_artifacts(run.info.run_id)}
    assert {"metrics.json", "log.txt", "report.html", "valid_predictions.csv", "plots"} <= files
    assert tags["trainstack.model_uri"].startswith("models:/")
    log = (run_dir(root, "fr", run_id) / "log.txt").read_text()
    assert {point.timestamp for point in epochs} <= set(epoch_end_times(log).values())  # each epoch's end
    trainer_meta = json.loads((run_dir(root, "fr", run_id) / "metadata/trainer.json").read_text())
    digests = trainer_meta["split_digests"]  # each split its own, none the data's hash
    assert {(i.dataset.name, i.dataset.digest) for i in run.inputs.dataset_inputs} == {
        ("fr-train", digests["train"]),
        ("fr-valid", digests["valid"]),
    }
    assert len({digests["train"], digests["valid"], params["data_hash"]}) == 3
    for given in run.inputs.dataset_inputs:
        assert [c["name"] for c in json.loads(given.dataset.schema)["mlflow_colspec"]] == ["text", "labels"]

    lengths = history_lengths(server, run)
    again = cli(root, "runs", "export", "fr", run_id, *sets(server))
    assert again.exit_code == 0 and "0 created, 0 updated, 1 unchanged" in again.output
    # Forget that the mirror is complete: the next export compares point by point and writes none twice.
    client(server).delete_tag(run.info.run_id, "trainstack.source_sha")
    server.proxy.clear()
    redo = cli(root, "runs", "export", "fr", run_id, *sets(server, server.proxy.url))
    assert redo.exit_code == 0 and "0 created, 1 updated" in redo.output, redo.output
    batches = [seen for seen in server.proxy.requests if "log-batch" in seen.target]
    assert len(batches) == 1  # the tags; no params, no metric point (all there), and no second run or model
    created = [
        seen.target
        for seen in server.proxy.requests
        if seen.method == "POST" and (seen.target.endswith("/runs/create") or seen.target.endswith("/logged-models"))
    ]
    assert created == []
    [same] = mirrored(server, run_id)
    assert same.info.run_id == run.info.run_id and history_lengths(server, same) == lengths


def test_a_second_mirror_of_one_run_is_removed_by_the_next_export(server, trained):
    """Two MLflow runs for one trainstack run (a create_run retried after the server had committed it, or two
    commands mirroring at once): the oldest stays the mirror, the other is deleted."""
    root, run_id = trained
    assert cli(root, "runs", "export", "fr", run_id, *sets(server)).exit_code == 0
    [original] = mirrored(server, run_id)
    client(server).create_run(
        original.info.experiment_id,
        start_time=original.info.start_time + 1,
        tags={"trainstack.run_id": run_id, "trainstack.lang": "fr"},
    )
    assert len(mirrored(server, run_id)) == 2
    r = cli(root, "runs", "export", "fr", run_id, *sets(server))
    assert r.exit_code == 0 and "1 unchanged" in r.output, r.output
    assert [run.info.run_id for run in mirrored(server, run_id)] == [original.info.run_id]


@pytest.mark.parametrize("fault,suffix", [("status-401", "a401"), ("status-503", "a503"), ("cut", "acc0")])
def test_a_tracker_failing_mid_export_is_completed_later_with_nothing_twice(server, trained, capsys, fault, suffix):
    """What a training command does at its end (mirror_if_tracked, then say_mirrored), the server refusing (401),
    failing (503) or dying (a cut connection) after the MLflow run was created: one line, no exception; then a
    catch-up."""
    from stacks.cli.mirror_view import say_mirrored
    from stacks.project import Project
    from stacks.tracking.after_run import mirror_if_tracked
    from trainer.storage import open_bucket

    root, run_id = trained
    cli(root, "runs", "export", "fr", run_id, *sets(server))  # the original, to compare with (idempotent)
    copy = _copy_run(root, run_id, f"{run_id[:-4]}{suffix}", f1_delta=0.0)
    kind, _, status = fault.partition("-")
    server.proxy.add(kind, r"log-batch", times=10_000, status=int(status or 503), skip=1)  # the params go, then none
    config = Project.discover(root).load("local", [f"tracking.mlflow.uri={server.proxy.url}"])
    try:
        say_mirrored(config, mirror_if_tracked(config, open_bucket(config.bucket), [("fr", copy)]))
    finally:
        server.proxy.clear()
    lines = [line for line in capsys.readouterr().err.splitlines() if "not mirrored to MLflow" in line]
    assert len(lines) == 1 and f"fr {copy}" in lines[0] and f"trainctl runs export fr {copy}" in lines[0]
    [partial] = mirrored(server, copy)  # created before the fault: found again, never created twice
    r = cli(root, "runs", "export", "fr", copy, *sets(server))
    assert r.exit_code == 0 and "0 created, 1 updated" in r.output, r.output
    [done] = mirrored(server, copy)
    assert done.info.run_id == partial.info.run_id and done.info.status == "FINISHED"
    [original] = mirrored(server, run_id)
    assert history_lengths(server, done) == history_lengths(server, original)


def _copy_run(root, run_id: str, new_id: str, *, f1_delta: float) -> str:
    """The run's folder under another id, its decisive macro-F1 moved by `f1_delta` (same rows, same model)."""
    src, dst = run_dir(root, "fr", run_id), run_dir(root, "fr", new_id)
    if not dst.exists():
        shutil.copytree(src, dst)
        for name in ("status.json", "metrics.json", "metadata/trainer.json"):
            path = dst / name
            doc = json.loads(path.read_text())
            if "run_id" in doc:
                doc["run_id"] = new_id
            if name == "metrics.json":
                doc["macro_f1"] = round(doc["macro_f1"] + f1_delta, 4)
            if name == "metadata/trainer.json":
                doc["args"]["run_id"] = new_id
            path.write_text(json.dumps(doc))
    return new_id


def test_promote_moves_the_alias_and_the_pyfunc_model_predicts_as_trainctl(server, trained, tmp_path, monkeypatch):
    root, run_id = trained
    worse = _copy_run(root, run_id, f"{run_id[:-4]}wrse", f1_delta=-0.2)
    name = "trainstack-local-fr"  # the env's own: trainstack-{env}-{lang}
    assert cli(root, "promote", "fr", worse, *sets(server)).exit_code == 0
    registry = client(server)
    assert registry.get_model_version_by_alias(name, "champion").version == "1"
    p = cli(root, "promote", "fr", run_id, *sets(server))
    assert p.exit_code == 0 and f"{name} version 2 is @champion" in p.output, p.output
    refused = cli(root, "promote", "fr", worse, *sets(server))
    assert refused.exit_code == 2
    assert registry.get_model_version_by_alias(name, "champion").version == "2"
    assert len(registry.search_model_versions(f"name = '{name}'")) == 2

    texts = [row["text"] for row in csv.DictReader(open(SAMPLE / "fr" / "train.csv", encoding="utf-8"))][:20]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)  # not set_tracking_uri: it would outlive the test
    model = mlflow.pyfunc.load_model(f"models:/{name}@champion")
    import pandas as pd

    served = model.predict(pd.DataFrame({"text": texts}))
    with open(tmp_path / "in.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows(enumerate(texts))
    r = cli(root, "predict", "fr", "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "out.csv"))
    assert r.exit_code == 0, r.output
    expected = [sorted(filter(None, row["labels"].split(";"))) for row in csv.DictReader(open(tmp_path / "out.csv"))]
    assert [sorted(cell) for cell in served["labels"]] == expected
    # its own code, not this process's `trainer`; and the same in an interpreter with no project at all
    assert type(model.unwrap_python_model().served).__module__.startswith("trainer_")
    [fresh, imported] = load_in_a_fresh_interpreter(
        [f"models:/{name}@champion"], texts, cwd=tmp_path, env={"MLFLOW_TRACKING_URI": server.url}
    )
    assert [sorted(labels) for labels in fresh["labels"]] == expected
    assert imported == [fresh["code"].split(".")[0]]  # its own code package, nothing else
    np.testing.assert_allclose(fresh["probs"], served.drop(columns=["labels", "error"]).to_numpy(float), atol=1e-6)
    assert served["error"].isna().all()  # every text classified


def test_tensorboard_shows_the_run_as_mlflow_names_it_with_its_rates_and_hparams(trained):
    """What `tensorboard --logdir <bucket>/fr/runs` shows, read with TensorBoard's own loader: the run is one
    TensorBoard run, a section per stage, every figure MLflow's mirror has at its key and step (each epoch's
    learning rate, the LM's tokens/s, the cost trainctl adds after the run), and one HParams session with
    MLflow's params and the final figures."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    root, run_id = trained
    folder = run_dir(root, "fr", run_id)
    history = json.loads((folder / "metrics.json").read_text())["history"]
    board = EventMultiplexer().AddRunsFromDirectory(str(folder.parent)).Reload()
    run = f"{run_id}/tensorboard"
    assert run in board.Runs() and all(r.count("/") == 1 for r in board.Runs())  # no folder per stage
    seen = {(tag, e.step): e.value for tag in board.Runs()[run]["scalars"] for e in board.Scalars(run, tag)}
    mirror = read_mirror(open_bucket(f"file://{root / BUCKET}"), "fr", run_id, env="local")
    mlflow = {(m.key, m.step): m.value for m in mirror.metrics}
    assert seen == pytest.approx(mlflow)  # every figure, the LM's throughput and trainctl's cost included
    assert any(tag == "lm_finetune/tokens_per_s" for tag, _ in mlflow) and any(k.startswith("cost/") for k, _ in mlflow)
    assert not any(tag == "classifier/tokens_per_s" for tag, _ in mlflow)
    assert all((f"{record['stage']}/lr", step) in mlflow for step, record in enumerate(history, 1))
    for step, record in enumerate(history, 1):
        assert (f"{record['stage']}/valid_loss", step) in seen and seen[(f"{record['stage']}/lr", step)] > 0
    assert all(tag.split("/")[0] in {h["stage"] for h in history} for tag, step in seen if step < len(history))
    hparams = {
        tag: HParamsPluginData.FromString(raw) for tag, raw in board.PluginRunToTagToContent("hparams")[run].items()
    }
    settings = hparams["_hparams_/session_start_info"].session_start_info.hparams
    # MLflow's params, name for name and value for value (the tokenizer the run used, not `auto`)
    shown = {k: v.string_value if v.HasField("string_value") else v.number_value for k, v in settings.items()}
    assert shown == {k: v if isinstance(shown.get(k), str) else float(v) for k, v in mirror.params.items()}
    assert shown["tokenizer"] == mirror.params["tokenizer"] != "auto" and "bucket" not in shown
    assert {"data_hash", "device", "n_train", "n_valid", "n_test", "precision_used"} <= set(shown)
    assert "macro_f1" in [m.name.tag for m in hparams["_hparams_/experiment"].experiment.metric_infos]
    if mirror.tags["trainstack.kept"] == "classifier":  # the best blend was not kept: no weight of it
        assert "blend_weight" not in {key for key, _ in mlflow}


BUCKET = ".trainstack/local/bucket"


def _staged(tmp_path, run_id: str, *, promoted: bool = False):
    """A project whose bucket holds one finished German run (tests/support/runs.py: tracked_run), promoted or
    not: German, so the session's French run and its registry are left alone."""
    root = make_project(tmp_path / "proj")
    tracked_run(root / BUCKET, "de", run_id)
    if promoted:
        write(root / BUCKET, "de/models/CURRENT", {"run_id": run_id, "macro_f1": 0.8})
    return root


def test_a_mirrored_run_looks_like_one_mlflow_started(server, tmp_path, monkeypatch):
    """MLflow's own fields, epoch times, datasets, and a logged model with its step, params, metrics,
    signature and input example; the exporting machine's system metrics never attached (with
    MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING on and no psutil, a fluent run would not even start)."""
    from stacks.tracking.client import exporting_user

    run_id = "20261127-100000-a001"
    root = _staged(tmp_path, run_id)
    monkeypatch.setenv("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "true")
    r = cli(root, "runs", "export", "de", run_id, *sets(server))
    assert r.exit_code == 0 and "1 created" in r.output, r.output
    said = r.stdout.splitlines()  # the model's two transfers, each with its size and time
    assert f"downloading the model files of de {run_id} from the bucket…" in said, r.stdout
    assert any(
        re.fullmatch(rf"logging the model of de {run_id} to MLflow: [\d.]+ MB in [\d.]+ s \(.*/s\)", line)
        for line in said
    ), r.stdout
    [run] = mirrored(server, run_id)
    tags, mlflow_run_id = run.data.tags, run.info.run_id
    assert run.info.user_id == tags["mlflow.user"] == exporting_user() and run.info.run_name == f"de-{run_id}"
    assert tags["mlflow.source.name"] == "trainctl train de" and tags["mlflow.source.type"] == "JOB"
    assert tags["mlflow.source.git.commit"] == "0123abc" and tags["mlflow.docker.image.uri"] == TRACKED_IMAGE
    assert tags["trainstack.machine_type"] == "g2-standard-8" and tags["trainstack.market"] == "spot"
    assert tags["trainstack.base_lm.run_id"] == "20261126-090000-beef"
    assert run.data.metrics["cost/est_usd"] == 0.175
    points = client(server).get_metric_history(mlflow_run_id, "classifier/train_loss")
    assert [(p.step, p.timestamp) for p in points] == [(2, utc_ms("10:10:00")), (3, utc_ms("10:20:00"))]
    assert not [key for key in run.data.metrics if key.startswith("system/")]

    inputs = {i.dataset.name: i for i in run.inputs.dataset_inputs}
    assert set(inputs) == {"de-train", "de-valid"}
    train = inputs["de-train"]
    # a run from before split digests: each split's from the data's hash and its name, never the hash itself
    assert len({train.dataset.digest, inputs["de-valid"].dataset.digest, "d1e2f3a4b5c6d7e8"}) == 3
    assert {(t.key, t.value) for t in train.tags} == {("mlflow.data.context", "train")}
    assert json.loads(train.dataset.source)["uri"] == f"file://{root / BUCKET}/de/data/"
    assert train.dataset.source_type == "local" and json.loads(train.dataset.profile) == {"num_rows": 30}

    [output] = run.outputs.model_outputs
    model = client(server).get_logged_model(output.model_id)
    assert output.step == 3 and model.model_uri == tags["trainstack.model_uri"]
    assert model.params["epochs_clf"] == "2" and model.params["data_hash"] == "d1e2f3a4b5c6d7e8"
    linked = {m.key: m.value for m in model.metrics}
    assert linked["macro_f1"] == 0.8 and linked["f1/b c"] == 0.9 and "cost/est_usd" in linked
    folder = mlflow.artifacts.download_artifacts(
        f"{model.artifact_location}/", tracking_uri=server.url, dst_path=str(tmp_path / "model")
    )
    logged = mlflow.models.Model.load(folder)
    # the code package one zip (each file is a request, authorized one by one on a server with logins)
    assert [p.name for p in (Path(folder) / "code").iterdir()] == [f"{model.tags['trainstack.code_package']}.zip"]
    assert len([p for p in Path(folder).rglob("*") if p.is_file()]) <= 15
    outputs = {c.name: c.to_dict()["type"] for c in logged.signature.outputs.inputs}
    assert outputs == {"labels": "array", "prob_a": "double", "prob_b c": "double", "error": "string"}
    example = logged.load_input_example(folder)
    assert list(example["text"]) == ["un premier texte", "un second, texte"]

    again = cli(root, "runs", "export", "de", run_id, *sets(server))  # nothing is logged twice
    assert again.exit_code == 0 and "1 unchanged" in again.output
    client(server).delete_tag(mlflow_run_id, "trainstack.source_sha")
    assert cli(root, "runs", "export", "de", run_id, *sets(server)).exit_code == 0
    [same] = mirrored(server, run_id)
    assert len(same.inputs.dataset_inputs) == 2 and len(same.outputs.model_outputs) == 1


def test_mlflow_own_variables_are_enough_to_mirror(server, tmp_path, monkeypatch):
    """MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME and MLFLOW_REGISTRY_URI where the config sets none (the
    registry here: the same server through the proxy, so its requests are seen), the registered model the
    env's own; the config wins where set, a registered model it names too; the variables are as they were."""
    run_id = "20261127-100000-a002"
    root = _staged(tmp_path, run_id, promoted=True)
    env = {
        "MLFLOW_TRACKING_URI": server.url,
        "MLFLOW_EXPERIMENT_NAME": "from-the-env",
        "MLFLOW_REGISTRY_URI": server.proxy.url,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    server.proxy.clear()
    r = cli(root, "runs", "export", "de", run_id)
    assert r.exit_code == 0 and "experiment from-the-env: 1 created" in r.output, r.output
    assert "de: champion -> trainstack-local-de version 1" in r.output
    experiment = client(server).get_experiment_by_name("from-the-env")
    assert client(server).search_runs([experiment.experiment_id], f"tags.`trainstack.run_id` = '{run_id}'")
    assert any("registered-models" in seen.target for seen in server.proxy.requests)
    assert {name: os.environ.get(name) for name in env} == env

    r = cli(
        root,
        "runs",
        "export",
        "de",
        run_id,
        "--set",
        "tracking.mlflow.experiment=from-the-config",
        "--set",
        "tracking.mlflow.registered_model=team-{lang}-classifier",
    )
    assert r.exit_code == 0 and "experiment from-the-config: 1 created" in r.output, r.output
    assert client(server).get_model_version_by_alias("team-de-classifier", "champion").version == "1"
