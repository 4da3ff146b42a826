"""What a run folder becomes in MLflow (stacks/tracking/record.py, pure) and how a failing tracker is told."""
from __future__ import annotations

import json

import pytest

from stacks.tracking import CHAMPION, catch_up
from stacks.tracking.client import why
from stacks.tracking.record import RUN_ID_TAG, SOURCE_TAG, key_name, read_mirror
from trainer.storage import open_bucket

RUN = "20261127-101010-abcd"


def stage_run(root, *, state="SUCCEEDED"):
    folder = root / "fr" / "runs" / RUN
    (folder / "metadata").mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({
        "run_id": RUN, "lang": "fr", "env": "dev", "state": state, "stage": "done", "job": "classifier",
        "started_at": "2026-11-27T10:10:10+00:00", "finished_at": "2026-11-27T10:20:10+00:00" if state == "SUCCEEDED" else None}))
    (folder / "metrics.json").write_text(json.dumps({
        "run_id": RUN, "lang": "fr", "labels": ["a", "b c"], "macro_f1": 0.8, "micro_f1": 0.85, "accuracy": 0.9,
        "kept": "blend", "tokenizer": "fastai-spacy-blank-fr", "n_train": 30, "n_valid": 10, "n_test": 0,
        "per_label": {"a": {"f1": 0.7}, "b c": {"f1": 0.9}}, "baseline_tfidf": {"macro_f1": 0.75, "micro_f1": 0.8},
        "blend": {"weight": 0.4}, "base_lm": {"id": "pt-1"},
        "history": [{"stage": "lm_finetune", "phase": "1/1", "epoch": 1, "train_loss": 4.0, "valid_loss": 3.9},
                    {"stage": "classifier", "phase": "1/2", "epoch": 1, "train_loss": 0.7, "macro_f1@0.5": 0.5},
                    {"stage": "classifier", "phase": "2/2", "epoch": 2, "train_loss": 0.5, "valid_loss": float("nan")}]}))
    (folder / "metadata/trainer.json").write_text(json.dumps({"args": {"epochs_clf": 2, "bucket": "x", "lr": 0.01},
                                                               "data_hash": "d1", "device": "cpu"}))
    (folder / "metadata/trainctl.json").write_text(json.dumps({"git_sha": "0123abc"}))
    (folder / "log.txt").write_text("a line\n")
    (folder / "model.pth").write_bytes(b"model")
    return open_bucket(f"file://{root}")


def test_a_run_folder_becomes_tags_params_and_metrics_with_global_epoch_steps(tmp_path):
    mirror = read_mirror(stage_run(tmp_path), "fr", RUN, env="local")
    assert mirror.tags[RUN_ID_TAG] == RUN and mirror.tags["trainstack.env"] == "dev"  # the run's own env
    assert mirror.tags["trainstack.kept"] == "blend" and mirror.tags["trainstack.git_sha"] == "0123abc"
    assert mirror.tags["trainstack.base_lm"] == "pt-1" and mirror.mlflow_status == "FINISHED"
    assert mirror.params == {"epochs_clf": "2", "lr": "0.01", "data_hash": "d1", "tokenizer": "fastai-spacy-blank-fr",
                             "n_train": "30", "n_valid": "10", "n_test": "0", "device": "cpu"}
    points = {(m.key, m.step): m.value for m in mirror.metrics}
    assert points[("lm_finetune/valid_loss", 1)] == 3.9 and points[("classifier/train_loss", 3)] == 0.5
    assert ("classifier/macro_f1_at_0.5", 2) in points and ("classifier/valid_loss", 3) not in points  # NaN left out
    assert points[("macro_f1", 3)] == 0.8 and points[("f1/b c", 3)] == 0.9 and points[("tfidf/macro_f1", 3)] == 0.75
    assert points[("blend_weight", 3)] == 0.4
    assert mirror.files == ["metrics.json", "log.txt", "metadata/trainer.json"] and mirror.model
    assert mirror.end_ms - mirror.start_ms == 600_000


def test_the_source_hash_is_stable_and_moves_with_the_run(tmp_path):
    bucket = stage_run(tmp_path, state="RUNNING")
    first, again = (read_mirror(bucket, "fr", RUN, env="local") for _ in range(2))
    assert first.source_sha == again.source_sha == first.tags[SOURCE_TAG]
    assert first.mlflow_status == "RUNNING" and first.end_ms is None and not first.model
    status = tmp_path / "fr/runs" / RUN / "status.json"
    status.write_text(status.read_text().replace('"RUNNING"', '"SUCCEEDED"').replace('"finished_at": null',
                                                                                     '"finished_at": "2026-11-27T11:00:00+00:00"'))
    assert read_mirror(bucket, "fr", RUN, env="local").source_sha != first.source_sha


@pytest.mark.parametrize("text,expected", [
    ("macro_f1@0.5", "macro_f1_at_0.5"), ("f1/κατηγορία", "f1/κατηγορία"), ("f1/a|b", "f1/a_b")])
def test_keys_mlflow_accepts_keep_any_script(text, expected):
    assert key_name(text) == expected


def test_the_catch_up_command_names_what_was_missed(tmp_path):
    config = type("C", (), {"env": "dev"})()
    assert catch_up(config, [("fr", "r1"), ("fr", "r2")]) == "trainctl runs export fr r1 r2 --env dev"
    assert catch_up(config, [("fr", CHAMPION)]) == "trainctl runs export fr --env dev"
    assert catch_up(config, [("fr", "r1"), ("en", "r2")]) == "trainctl runs export --env dev"


@pytest.mark.parametrize("message,reason", [
    ("API request to endpoint /api/2.0/mlflow/runs/log-batch failed with error code 401 != 200", "(401)"),
    ("API request to endpoint x failed with error code 503 != 200. Response body: ''", "server error (503)"),
    ("HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded (Caused by NewConnectionError)", "unreachable"),
    ("PERMISSION_DENIED: no", "forbids"),
    ("HTTPConnectionPool(host='h', port=8403): Max retries exceeded (Caused by ResponseError('too many 503 error "
     "responses'))", "server error (503)"),
    ("HTTPConnectionPool(host='h', port=8401): Max retries exceeded (Caused by NewConnectionError: refused)",
     "unreachable")])
def test_a_failed_call_is_said_in_a_few_words(message, reason):
    assert reason in why(RuntimeError(message))


def test_the_alias_must_be_one_mlflow_accepts(project):
    from stacks.errors import ConfigError
    from stacks.project import Project

    with pytest.raises(ConfigError, match="alias"):
        Project.discover().load("local", ["tracking.mlflow.alias=no spaces"])
    config = Project.discover().load("local", ["tracking.mlflow.uri=http://127.0.0.1:5000"])
    assert config.tracking.mlflow.alias == "champion" and config.tracking.mlflow.registered_model == "trainstack-{lang}"


def test_a_pretrain_run_mirrors_its_perplexity_curve_and_tokens_and_no_model(tmp_path):
    bucket = stage_run(tmp_path)
    metrics = tmp_path / "fr/runs" / RUN / "metrics.json"
    metrics.write_text(json.dumps({"run_id": RUN, "lang": "fr", "job": "pretrain-lm", "perplexity": 42.4,
                                   "base_lm": {"id": "pt-9", "tokens": 1_000_000},
                                   "history": [{"stage": "base_lm", "phase": "1/1", "epoch": 1, "perplexity": 60.0},
                                               {"stage": "base_lm", "phase": "1/1", "epoch": 2, "perplexity": 45.0}]}))
    mirror = read_mirror(bucket, "fr", RUN, env="local")
    points = {(m.key, m.step): m.value for m in mirror.metrics}
    assert points[("base_lm/perplexity", 1)] == 60.0 and points[("base_lm/perplexity", 2)] == 45.0
    assert points[("perplexity", 2)] == 42.4 and points[("tokens", 2)] == 1_000_000
    assert mirror.tags["trainstack.job"] == "pretrain-lm" and mirror.tags["trainstack.base_lm"] == "pt-9"
    assert not mirror.model  # a base LM is published to <lang>/lm/, not served
