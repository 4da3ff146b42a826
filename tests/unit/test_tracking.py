"""What a run folder becomes in MLflow (stacks/tracking/record.py, pure) and how a failing tracker is told."""

from __future__ import annotations

import json

import pytest

from stacks.tracking import CHAMPION, catch_up
from stacks.tracking.client import why
from stacks.tracking.record import RUN_ID_TAG, SOURCE_TAG, key_name, read_mirror
from tests.support.runs import TRACKED_IMAGE, tracked_run, utc_ms
from trainer.data.splits import Splits
from trainer.runfiles.restarts import append_restart
from trainer.storage import open_bucket

RUN = "20261127-101010-abcd"


def stage_run(root, *, state="SUCCEEDED"):
    folder = root / "fr" / "runs" / RUN
    (folder / "metadata").mkdir(parents=True)
    (folder / "status.json").write_text(
        json.dumps(
            {
                "run_id": RUN,
                "lang": "fr",
                "env": "dev",
                "state": state,
                "stage": "done",
                "job": "classifier",
                "started_at": "2026-11-27T10:10:10+00:00",
                "finished_at": "2026-11-27T10:20:10+00:00" if state == "SUCCEEDED" else None,
            }
        )
    )
    (folder / "metrics.json").write_text(
        json.dumps(
            {
                "run_id": RUN,
                "lang": "fr",
                "labels": ["a", "b c"],
                "macro_f1": 0.8,
                "micro_f1": 0.85,
                "accuracy": 0.9,
                "kept": "blend",
                "tokenizer": "fastai-spacy-blank-fr",
                "n_train": 30,
                "n_valid": 10,
                "n_test": 0,
                "per_label": {"a": {"f1": 0.7}, "b c": {"f1": 0.9}},
                "baseline_tfidf": {"macro_f1": 0.75, "micro_f1": 0.8},
                "blend": {"weight": 0.4},
                "base_lm": {"id": "pt-1"},
                "history": [
                    {"stage": "lm_finetune", "phase": "1/1", "epoch": 1, "train_loss": 4.0, "valid_loss": 3.9},
                    {"stage": "classifier", "phase": "1/2", "epoch": 1, "train_loss": 0.7, "macro_f1@0.5": 0.5},
                    {"stage": "classifier", "phase": "2/2", "epoch": 2, "train_loss": 0.5, "valid_loss": float("nan")},
                ],
            }
        )
    )
    (folder / "metadata/trainer.json").write_text(
        json.dumps({"args": {"epochs_clf": 2, "bucket": "x", "lr": 0.01}, "data_hash": "d1", "device": "cpu"})
    )
    (folder / "metadata/trainctl.json").write_text(json.dumps({"git_sha": "0123abc"}))
    (folder / "log.txt").write_text("a line\n")
    (folder / "model.pth").write_bytes(b"model")
    return open_bucket(f"file://{root}")


def test_a_run_folder_becomes_tags_params_and_metrics_with_global_epoch_steps(tmp_path):
    mirror = read_mirror(stage_run(tmp_path), "fr", RUN, env="local")
    assert mirror.tags[RUN_ID_TAG] == RUN and mirror.tags["trainstack.env"] == "dev"  # the run's own env
    assert mirror.tags["trainstack.kept"] == "blend" and mirror.tags["trainstack.git_sha"] == "0123abc"
    assert mirror.tags["trainstack.base_lm"] == "pt-1" and mirror.mlflow_status == "FINISHED"
    assert mirror.params == {
        "epochs_clf": "2",
        "lr": "0.01",
        "data_hash": "d1",
        "tokenizer": "fastai-spacy-blank-fr",
        "n_train": "30",
        "n_valid": "10",
        "n_test": "0",
        "device": "cpu",
    }
    points = {(m.key, m.step): m.value for m in mirror.metrics}
    assert points[("lm_finetune/valid_loss", 1)] == 3.9 and points[("classifier/train_loss", 3)] == 0.5
    assert ("classifier/macro_f1_at_0.5", 2) in points and ("classifier/valid_loss", 3) not in points  # NaN left out
    assert points[("macro_f1", 3)] == 0.8 and points[("f1/b c", 3)] == 0.9 and points[("tfidf/macro_f1", 3)] == 0.75
    assert points[("blend_weight", 3)] == 0.4
    doc = json.loads((tmp_path / "fr/runs" / RUN / "metrics.json").read_text())
    (tmp_path / "fr/runs" / RUN / "metrics.json").write_text(json.dumps({**doc, "kept": "classifier"}))
    alone = read_mirror(open_bucket(f"file://{tmp_path}"), "fr", RUN, env="local")  # the best blend, not kept
    assert "blend_weight" not in {m.key for m in alone.metrics} and "blend" in doc
    assert mirror.files == ["metrics.json", "log.txt", "metadata/trainer.json"] and mirror.model
    assert mirror.end_ms - mirror.start_ms == 600_000


def test_the_source_hash_is_stable_and_moves_with_the_run(tmp_path):
    bucket = stage_run(tmp_path, state="RUNNING")
    first, again = (read_mirror(bucket, "fr", RUN, env="local") for _ in range(2))
    assert first.source_sha == again.source_sha == first.tags[SOURCE_TAG]
    assert first.mlflow_status == "RUNNING" and first.end_ms is None and not first.model
    status = tmp_path / "fr/runs" / RUN / "status.json"
    status.write_text(
        status.read_text()
        .replace('"RUNNING"', '"SUCCEEDED"')
        .replace('"finished_at": null', '"finished_at": "2026-11-27T11:00:00+00:00"')
    )
    assert read_mirror(bucket, "fr", RUN, env="local").source_sha != first.source_sha


@pytest.mark.parametrize(
    "text,expected", [("macro_f1@0.5", "macro_f1_at_0.5"), ("f1/κατηγορία", "f1/κατηγορία"), ("f1/a|b", "f1/a_b")]
)
def test_keys_mlflow_accepts_keep_any_script(text, expected):
    assert key_name(text) == expected


def test_the_catch_up_command_names_what_was_missed(tmp_path):
    config = type("C", (), {"env": "dev"})()
    assert catch_up(config, [("fr", "r1"), ("fr", "r2")]) == "trainctl runs export fr r1 r2 --env dev"
    assert catch_up(config, [("fr", CHAMPION)]) == "trainctl runs export fr --env dev"
    assert catch_up(config, [("fr", "r1"), ("en", "r2")]) == "trainctl runs export --env dev"


@pytest.mark.parametrize(
    "message,reason",
    [
        ("API request to endpoint /api/2.0/mlflow/runs/log-batch failed with error code 401 != 200", "(401)"),
        ("API request to endpoint x failed with error code 503 != 200. Response body: ''", "server error (503)"),
        (
            "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded (Caused by NewConnectionError)",
            "unreachable",
        ),
        ("PERMISSION_DENIED: no", "forbids"),
        (
            "HTTPConnectionPool(host='h', port=8403): Max retries exceeded (Caused by ResponseError('too many 503 "
            "error "
            "responses'))",
            "server error (503)",
        ),
        (
            "HTTPConnectionPool(host='h', port=8401): Max retries exceeded (Caused by NewConnectionError: refused)",
            "unreachable",
        ),
    ],
)
def test_a_failed_call_is_said_in_a_few_words(message, reason):
    assert reason in why(RuntimeError(message))


def test_a_refused_call_names_what_it_was_doing_and_where():
    from stacks.tracking.client import TrackerCallFailed, doing

    refused = (
        "API request to endpoint /api/2.0/mlflow/logged-models failed with error code 403 != 200. "
        "Response body: 'Permission denied'"
    )
    with pytest.raises(TrackerCallFailed) as caught:
        with doing("logging the model of run r1 (fr x) in experiment 'trainstack-local'"):
            raise RuntimeError(refused)
    assert why(caught.value) == (
        "refused (403) logging the model of run r1 (fr x) in experiment 'trainstack-local': "
        "this account lacks the permission on it"
    )
    assert why(RuntimeError(refused)) == "forbids this account (403)"


def test_the_alias_must_be_one_mlflow_accepts(project):
    from stacks.errors import ConfigError
    from stacks.project import Project

    with pytest.raises(ConfigError, match="alias"):
        Project.discover().load("local", ["tracking.mlflow.alias=no spaces"])
    config = Project.discover().load("local", ["tracking.mlflow.uri=http://127.0.0.1:5000"])
    assert config.tracking.mlflow.alias == "champion"


def test_a_pretrain_run_mirrors_its_perplexity_curve_and_tokens_and_no_model(tmp_path):
    bucket = stage_run(tmp_path)
    metrics = tmp_path / "fr/runs" / RUN / "metrics.json"
    metrics.write_text(
        json.dumps(
            {
                "run_id": RUN,
                "lang": "fr",
                "job": "pretrain-lm",
                "perplexity": 42.4,
                "base_lm": {"id": "pt-9", "tokens": 1_000_000, "corpus_hash": "c0ffee", "corpus_tokens": 1_200_000},
                "history": [
                    {"stage": "base_lm", "phase": "1/1", "epoch": 1, "perplexity": 60.0},
                    {"stage": "base_lm", "phase": "1/1", "epoch": 2, "perplexity": 45.0},
                ],
            }
        )
    )
    mirror = read_mirror(bucket, "fr", RUN, env="local")
    points = {(m.key, m.step): m.value for m in mirror.metrics}
    assert points[("base_lm/perplexity", 1)] == 60.0 and points[("base_lm/perplexity", 2)] == 45.0
    assert points[("perplexity", 2)] == 42.4 and points[("tokens", 2)] == 1_000_000
    assert mirror.tags["trainstack.job"] == "pretrain-lm" and mirror.tags["trainstack.base_lm"] == "pt-9"
    assert not mirror.model  # a base LM is published to <lang>/lm/, not served
    assert [(d.name, d.digest, d.context, d.rows) for d in mirror.datasets] == [
        ("fr-corpus", "c0ffee", "train", 1_200_000)
    ]
    assert mirror.tags["mlflow.source.name"] == "trainctl lm pretrain fr"


TRACKED = "20261127-100000-beef"


def test_a_run_carries_mlflow_own_tags_its_machine_and_its_base_lm(tmp_path):
    tracked_run(tmp_path, "de", TRACKED)
    bucket = open_bucket(f"file://{tmp_path}")
    append_restart(bucket, "de", TRACKED, {"cause": "exit code 137 (restart_on_exit_codes)", "exit_code": 137})
    mirror = read_mirror(bucket, "de", TRACKED, env="dev")
    tags = mirror.tags
    assert tags["trainstack.restarts"] == "1" and "metadata/restarts.json" in mirror.files  # the records: an artifact
    assert tags["mlflow.runName"] == f"de-{TRACKED}" and tags["mlflow.source.name"] == "trainctl train de"
    assert tags["mlflow.source.type"] == "JOB" and tags["mlflow.source.git.commit"] == "0123abc"
    assert tags["mlflow.docker.image.uri"] == TRACKED_IMAGE
    assert "mlflow.user" not in tags  # the run records none: the exporting account's, at creation
    machine = ("target", "machine_type", "gpu", "market", "nodes", "region", "zone", "placements")
    assert {k: tags[f"trainstack.{k}"] for k in machine} == {
        "target": "gcp",
        "machine_type": "g2-standard-8",
        "gpu": "nvidia-l4 x1",
        "market": "spot",
        "nodes": "1",
        "region": "europe-west4",
        "zone": "europe-west4-b",  # the zone it ran in last
        "placements": "europe-west4-a -> europe-west4-b",
    }
    assert tags["trainstack.base_lm"] == "pt-0123456789ab" and tags["trainstack.base_lm.source"] == "pretrain"
    assert tags["trainstack.base_lm.run_id"] == "20261126-090000-beef"  # from the LM's meta.json
    assert tags["trainstack.base_lm.uri"] == f"file://{tmp_path}/de/lm/pt-0123456789ab/"


def test_a_local_run_names_its_cpu_and_cores_and_no_cloud_machine(tmp_path):
    """trainctl.json records the language's gcp settings whatever the target: a --env local run's tags must
    not say it ran on a Spot L4."""
    tracked_run(tmp_path, "de", TRACKED)
    folder = tmp_path / "de/runs" / TRACKED / "metadata"
    meta = json.loads((folder / "trainctl.json").read_text())
    (folder / "trainctl.json").write_text(json.dumps({**meta, "target": "local"}))
    trainer = json.loads((folder / "trainer.json").read_text())
    (folder / "trainer.json").write_text(json.dumps({**trainer, "device": "cpu", "cpu": "AMD EPYC 9B14", "cores": 2}))
    tags = read_mirror(open_bucket(f"file://{tmp_path}"), "de", TRACKED, env="local").tags
    assert "trainstack.restarts" not in tags  # never restarted after an error
    machine = {k.removeprefix("trainstack."): v for k, v in tags.items() if k.startswith("trainstack.")}
    assert {k: machine.get(k) for k in ("target", "device", "cpu", "cores")} == {
        "target": "local",
        "device": "cpu",
        "cpu": "AMD EPYC 9B14",
        "cores": "2",
    }
    assert not {"machine_type", "gpu", "market", "nodes", "region", "zone", "placements"} & set(machine)
    assert tags["trainstack.git_sha"] == tags["mlflow.source.git.commit"] == "0123abc"


def test_a_run_recording_a_user_and_no_commit_says_so(tmp_path):
    tracked_run(tmp_path, "de", TRACKED, git_sha="")
    meta = tmp_path / "de/runs" / TRACKED / "metadata/trainctl.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "user": "ana", "spot": False, "gpu": None}))
    tags = read_mirror(open_bucket(f"file://{tmp_path}"), "de", TRACKED, env="dev").tags
    assert tags["mlflow.user"] == "ana" and "mlflow.source.git.commit" not in tags
    assert tags["trainstack.market"] == "on-demand" and tags["trainstack.gpu"] == "none"


def test_our_names_for_mlflow_tags_are_mlflow_own():
    from mlflow.utils import mlflow_tags

    from stacks.tracking import run_tags

    for name in ("USER", "SOURCE_NAME", "SOURCE_TYPE", "GIT_COMMIT", "RUN_NAME", "DOCKER_IMAGE_URI", "DATASET_CONTEXT"):
        assert getattr(run_tags, f"MLFLOW_{name}") == getattr(mlflow_tags, f"MLFLOW_{name}")


def test_epoch_points_sit_at_the_time_their_epoch_ended(tmp_path):
    """The epoch lines of log.txt date each point; an epoch run twice (resumed) takes its later line."""
    tracked_run(tmp_path, "de", TRACKED)
    mirror = read_mirror(open_bucket(f"file://{tmp_path}"), "de", TRACKED, env="dev")
    at = {(m.key, m.step): m.timestamp_ms for m in mirror.metrics}
    assert at[("lm_finetune/valid_loss", 1)] == utc_ms("10:05:00")
    assert at[("classifier/macro_f1_at_0.5", 2)] == utc_ms("10:10:00")
    assert at[("classifier/train_loss", 3)] == utc_ms("10:20:00")
    assert at[("macro_f1", 3)] == mirror.end_ms == utc_ms("10:30:00") and mirror.final_step == 3


def test_epochs_without_a_log_line_keep_a_time_derived_from_the_start(tmp_path):
    mirror = read_mirror(stage_run(tmp_path), "fr", RUN, env="local")  # a log without epoch lines
    offsets = {m.timestamp_ms - mirror.start_ms for m in mirror.metrics if m.key.endswith("train_loss")}
    assert offsets == {1, 2, 3}


def test_the_cost_and_spot_time_are_final_figures(tmp_path):
    tracked_run(tmp_path, "de", TRACKED)
    mirror = read_mirror(open_bucket(f"file://{tmp_path}"), "de", TRACKED, env="dev")
    points = {m.key: m.value for m in mirror.metrics if m.step == mirror.final_step}
    assert points["cost/est_usd"] == 0.175 and points["cost/billed_vm_s"] == 1800
    assert points["cost/vm_per_hour"] == 0.35 and points["cost/estimate_per_hour"] == 0.35
    assert points["spot/preemptions"] == 1 and points["spot/capacity_wait_s"] == 30


def test_the_data_is_one_dataset_per_split_each_with_its_digest_and_columns(tmp_path):
    tracked_run(tmp_path, "de", TRACKED, n_test=5)
    mirror = read_mirror(open_bucket(f"file://{tmp_path}"), "de", TRACKED, env="dev")
    assert [(d.name, d.context, d.rows) for d in mirror.datasets] == [
        ("de-train", "train", 30),
        ("de-valid", "valid", 10),
        ("de-test", "test", 5),
    ]
    assert len({d.digest for d in mirror.datasets}) == 3  # a run from before split digests: still one a split
    meta = tmp_path / "de/runs" / TRACKED / "metadata/trainer.json"
    recorded = json.loads(meta.read_text())
    splits = Splits(train=[0, 2, 3], valid=[1], test=[4])
    recorded["split_digests"] = splits.digests(recorded["data_hash"])
    recorded["args"].update(text_col="body", label_col="tags")
    meta.write_text(json.dumps(recorded))
    mirror = read_mirror(open_bucket(f"file://{tmp_path}"), "de", TRACKED, env="dev")
    assert [d.digest for d in mirror.datasets] == [recorded["split_digests"][s] for s in ("train", "valid", "test")]
    assert (
        Splits(train=[0, 2, 4], valid=[1], test=[3]).digests(recorded["data_hash"])["train"]
        != mirror.datasets[0].digest
    )
    assert json.loads(mirror.datasets[0].schema) == {
        "mlflow_colspec": [
            {"type": "string", "name": "body", "required": True},
            {"type": "string", "name": "tags", "required": True},
        ]
    }
    sources = {(d.source_uri, d.source_type) for d in mirror.datasets}
    assert sources == {(f"file://{tmp_path}/de/data/", "local")}  # a run from before runs kept a copy
    (tmp_path / "de/runs" / TRACKED / "metadata/data.json").write_text('{"files": {}}')
    pinned = read_mirror(open_bucket(f"file://{tmp_path}"), "de", TRACKED, env="dev")
    assert {d.source_uri for d in pinned.datasets} == {f"file://{tmp_path}/de/runs/{TRACKED}/data/"}
    no_test = read_mirror(stage_run(tmp_path / "other"), "fr", RUN, env="local")
    assert [d.context for d in no_test.datasets] == ["train", "valid"]


def test_mlflow_own_variables_fill_what_the_config_leaves_unset(project, monkeypatch):
    from stacks.project import Project
    from stacks.tracking import experiment_name, mlflow_settings, registry_uri

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    config = Project.discover().load("local", [])
    assert mlflow_settings(config) is None  # tracking off
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://from-env:5000")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "team-exp")
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", "http://registry:5000")
    settings = mlflow_settings(config)
    assert (settings.uri, settings.experiment) == ("http://from-env:5000", "team-exp")
    assert experiment_name(config) == "team-exp"
    assert registry_uri() == "http://registry:5000" and settings.registered_model == "trainstack-local-{lang}"
    config = Project.discover().load(
        "local",
        [
            "tracking.mlflow.uri=http://config:5000",
            "tracking.mlflow.experiment=cfg",
            "tracking.mlflow.registered_model=m-{lang}",
        ],
    )
    settings = mlflow_settings(config)
    assert (settings.uri, settings.experiment, settings.registered_model) == ("http://config:5000", "cfg", "m-{lang}")
    assert config.tracking.mlflow.uri == "http://config:5000"  # the config itself is left as loaded


def test_mlflow_chatter_is_muted_in_the_mirroring_thread_alone(capsys):
    """A training command mirrors a run from its worker thread while the other languages' lines go on: what
    MLflow prints there goes nowhere, what every other thread prints meanwhile is shown."""
    import threading

    from stacks.tracking.client import quiet

    inside, printed = threading.Event(), threading.Event()

    def other_language():
        inside.wait(10)
        print("[en] classifier epoch 2/4")
        printed.set()

    other = threading.Thread(target=other_language)
    other.start()
    with quiet():
        print("View run at http://127.0.0.1:5000/#/experiments/1/runs/abc")
        inside.set()
        assert printed.wait(10)
    other.join()
    print("after")
    assert capsys.readouterr().out == "[en] classifier epoch 2/4\nafter\n"
