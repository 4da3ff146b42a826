"""`--json` on the commands that act (train, runs export, data push, doctor): one JSON document on stdout,
everything else on stderr; and a tracker that cannot be reached is an error, with nothing to export too."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.errors import ExitStatus
from tests.support.project import SAMPLE
from tests.support.runs import fake_run

runner = CliRunner()
NO_TRACKER = "tracking.mlflow.uri=http://127.0.0.1:9"  # a closed port: refused at once


def bucket_root(project):
    return project / ".trainstack" / "local" / "bucket"


def test_train_json_says_each_run_its_state_and_the_exit(project, monkeypatch):
    from stacks.runs import orchestrate
    from stacks.runs.orchestrate import LanguageResult
    from trainer.runfiles.status_file import read_status
    from trainer.storage import open_bucket

    def run_languages(project_, config, langs, **_):
        fake_run(bucket_root(project), "fr", "20260101-100000-abcd", f1={"a": 0.9, "b": 0.7})
        bucket = open_bucket(config.bucket)
        outcome = SimpleNamespace(
            lang="fr",
            run_id="20260101-100000-abcd",
            bucket=bucket,
            status=read_status(bucket, "fr", "20260101-100000-abcd"),
            url=bucket.url,
        )
        return [
            LanguageResult("fr", ExitStatus.SUCCESS, 300.0, outcome=outcome),
            LanguageResult(
                "en",
                ExitStatus.BAD_INPUT,
                0.1,
                message="no labelled data at en/data/",
                hint="trainctl data push en DIR",
            ),
        ]

    monkeypatch.setattr(orchestrate, "run_languages", run_languages)
    r = runner.invoke(app, ["train", "fr", "en", "--json"])
    assert r.exit_code == 2, r.output
    document = json.loads(r.stdout)  # the summary table and the errors went to stderr
    assert document["exit_status"] == 2 and document["env"] == "local"
    fr, en = document["runs"]
    assert (fr["lang"], fr["run_id"], fr["state"], fr["exit_status"]) == ("fr", "20260101-100000-abcd", "SUCCEEDED", 0)
    assert fr["macro_f1"] == pytest.approx(0.8) and fr["tfidf_macro_f1"] == 0.7
    assert fr["url"].startswith("file://")
    assert (en["state"], en["run_id"], en["exit_status"], en["error"], en["hint"]) == (
        "ERROR",
        None,
        2,
        "no labelled data at en/data/",
        "trainctl data push en DIR",
    )
    assert "20260101-100000-abcd" in r.stderr and "no labelled data" in r.stderr


def test_an_unreachable_tracker_is_exit_3_even_with_nothing_to_export(project):
    r = runner.invoke(app, ["runs", "export", "--set", NO_TRACKER])
    assert r.exit_code == 3, r.output
    assert "MLflow at http://127.0.0.1:9: unreachable" in r.stderr and "0 created" not in r.output
    assert "then: trainctl runs export --env local" in r.stderr
    r = runner.invoke(app, ["runs", "export", "--set", NO_TRACKER, "--json"])
    assert r.exit_code == 3
    document = json.loads(r.stdout)
    assert document["runs"] == [] and document["reason"].startswith("unreachable")


def test_runs_export_json_says_what_became_of_each_run(project):
    fake_run(bucket_root(project), "fr", "20260101-100000-abcd", f1={"a": 0.9, "b": 0.7})
    broken = bucket_root(project) / "fr/runs/20260102-100000-dcba/status.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    r = runner.invoke(app, ["runs", "export", "fr", "--set", NO_TRACKER, "--json"])
    assert r.exit_code == 3, r.output
    document = json.loads(r.stdout)
    assert document["tracker"] == "http://127.0.0.1:9" and document["experiment"] == "trainstack-local"
    assert [(run["run_id"], run["action"]) for run in document["runs"]] == [
        ("20260101-100000-abcd", "missed"),
        ("20260102-100000-dcba", "missed"),
    ]
    assert document["runs"][0]["error"] == document["reason"] and document["runs"][0]["mlflow_run_id"] is None
    assert "2 not mirrored" in r.stderr


def test_data_push_json_lists_each_file_its_key_rows_and_the_warnings(project, tmp_path):
    folder = tmp_path / "fr"
    shutil.copytree(SAMPLE / "fr", folder)
    with (folder / "train.csv").open("a") as train:
        train.write('"",compte\n')  # an empty text: dropped
    (folder / "notes.md").write_text("not data")
    r = runner.invoke(app, ["data", "push", "fr", str(folder), "--json"])
    assert r.exit_code == 0, r.output
    document = json.loads(r.stdout)
    assert document["lang"] == "fr" and document["bucket"].startswith("file://")
    files = {f["key"]: f for f in document["files"]}
    assert set(files) == {"fr/data/train.csv", "fr/data/corpus/messages.txt"}
    train, corpus = files["fr/data/train.csv"], files["fr/data/corpus/messages.txt"]
    assert (train["kind"], train["action"]) == ("labelled", "uploaded")
    assert train["source"] == str(folder / "train.csv")
    assert train["rows"]["total"] == 381 and train["rows"]["dropped"] == 1 and train["rows"]["kept"] == 380
    assert sum(train["rows"]["skipped"].values()) == 1 and train["labels"] >= 2
    assert (corpus["kind"], corpus["lines"], corpus["rows"]) == ("corpus", 440, None)
    assert any("notes.md" in warning for warning in document["warnings"])
    assert "staged fr/data/train.csv" in r.stderr and "warning:" in r.stderr
    again = json.loads(runner.invoke(app, ["data", "push", "fr", str(folder), "--json"]).stdout)
    assert {f["action"] for f in again["files"]} == {"unchanged"}


def test_data_push_says_each_file_it_stages(project):
    r = runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr")])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert any(line.startswith("staged fr/data/train.csv (") for line in lines), r.stdout
    assert any(line.startswith("staged fr/data/corpus/messages.txt (") for line in lines), r.stdout
    r = runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr")])
    assert "unchanged fr/data/train.csv" in r.stdout


def test_a_long_file_says_it_is_still_going_without_a_terminal(capsys):
    import time

    from stacks.cli.file_progress import FileProgress

    with FileProgress(10, every_s=0.1) as progress:
        with progress.file("fr/data/train.csv", 10):
            time.sleep(0.5)
        time.sleep(0.3)  # nothing in flight: nothing said
    said = capsys.readouterr().out.splitlines()
    assert said and all(line.startswith("  still staging fr/data/train.csv: ") for line in said), said
    assert 2 <= len(said) <= 6


def test_doctor_json_is_the_checks_with_their_hints(project):
    r = runner.invoke(app, ["doctor", "--json"])
    document = json.loads(r.stdout)
    assert r.exit_code == (0 if document["ok"] else 3), r.output
    assert document["env"] == "local" and document["target"] == "local" and document["not_checked"]
    names = [check["name"] for check in document["checks"]]
    assert "terraform" in names and any(name.startswith("bucket ") for name in names)
    for check in document["checks"]:
        assert set(check) == {"name", "ok", "detail", "hint"} and (check["hint"] is None or not check["ok"])
    assert "terraform" in r.stderr  # the lines, as each check ends
