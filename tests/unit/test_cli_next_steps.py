"""User mistakes: exit 2 with what to do next, found before any slow work; storage advice for the
bucket's own scheme."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from tests.support.project import SAMPLE
from tests.support.runs import fake_run

runner = CliRunner()
PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
RUN = "20261127-100000-aaaa"


def one_line(output: str) -> str:
    return " ".join(output.split())


def bucket(project: Path) -> Path:
    return project / ".trainstack" / "local" / "bucket"


@pytest.fixture
def no_planning(monkeypatch):
    """`plan` without Terraform: records each call, plans nothing."""
    import stacks.plan_render.review as review

    calls = []
    monkeypatch.setattr(review, "plan_stacks", lambda *a, **kw: calls.append(kw) or ([], None))
    return calls


def test_plan_checks_its_markdown_path_before_planning(project, tmp_path, no_planning):
    kept = tmp_path / "mine.md"
    kept.write_text("my notes")
    for target, said in ((tmp_path / "missing" / "p.md", "no folder"), (tmp_path, "is a folder"), (kept, "exists")):
        r = runner.invoke(app, ["plan", "--markdown", str(target)])
        assert r.exit_code == 2 and said in r.output, r.output
        r = runner.invoke(app, ["plan", "--from-json", str(PLANS / "prod"), "--markdown", str(target)])
        assert r.exit_code == 2 and said in r.output, r.output
    assert not no_planning and kept.read_text() == "my notes"
    assert "--force" in one_line(r.output)
    r = runner.invoke(app, ["plan", "--markdown", str(kept), "--force"])
    assert r.exit_code == 0 and no_planning and "No changes" in kept.read_text(), r.output


def test_an_unknown_stack_says_how_to_pick_one(project, monkeypatch):
    monkeypatch.setattr("stacks.plan_render.review.Project.work_outdir", lambda *a: pytest.fail("planned"))
    r = runner.invoke(app, ["plan", "--stack", "nosuch"])
    out = one_line(r.output)
    assert r.exit_code == 2 and "no stack 'nosuch'" in out, r.output
    assert "→" in out and "--stack train-fr" in out


@pytest.fixture
def no_model_load(monkeypatch):
    """The model's loading recorded (and refused): nothing slow may run before predict's file checks."""
    import trainer.serving.served_model as serving

    loads = []

    def refuse(path):
        loads.append(path)
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(serving, "load_learner_file", refuse)
    return loads


def test_predict_checks_its_files_before_loading_the_model(project, tmp_path, no_model_load):
    fake_run(bucket(project), "fr", RUN, f1={"a": 0.8, "b": 0.6})
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    texts = tmp_path / "texts.csv"
    texts.write_text("text\nbonjour\n")
    taken = tmp_path / "labels.csv"
    taken.write_text("mine")
    cases = [
        (["--input", str(empty), "--output", str(tmp_path / "o.csv")], f"{empty} is empty"),
        (["--input", str(tmp_path / "nope.csv"), "--output", str(tmp_path / "o.csv")], "does not exist"),
        (["--input", str(texts), "--output", str(taken)], f"{taken} exists"),
        (["--input", str(texts), "--output", str(tmp_path / "no" / "o.csv")], "no folder"),
        (["--input", str(texts), "--output", str(tmp_path)], "is a folder"),
    ]
    for args, said in cases:
        r = runner.invoke(app, ["predict", "fr", *args])
        out = one_line(r.output)
        assert r.exit_code == 2 and said in out and "→" in out, r.output
    assert not no_model_load and taken.read_text() == "mine"
    r = runner.invoke(app, ["predict", "fr", "--input", str(texts)])
    out = one_line(r.output)
    assert r.exit_code == 2 and "→" in out and "--output labels.csv" in out, r.output


def test_a_model_file_that_cannot_be_loaded_is_exit_2_naming_it(project):
    fake_run(bucket(project), "fr", RUN, f1={"a": 0.8, "b": 0.6})
    model = bucket(project) / "fr" / "runs" / RUN / "model.pth"
    model.write_bytes(b"not a pickle at all")
    r = runner.invoke(app, ["predict", "fr", "bonjour"])
    out = one_line(r.output)
    assert r.exit_code == 2, r.output
    assert "unexpected" not in out and f"{model} cannot be loaded" in out, r.output
    assert "trainctl train fr" in out and "--run" in out


def test_a_file_bucket_that_cannot_exist_gets_folder_advice_not_gcloud(project, tmp_path):
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    where = not_a_folder / "bucket"
    r = runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr" / "train.csv"), "--set", f"bucket=file://{where}"])
    out = one_line(r.output)
    assert r.exit_code == 2, r.output
    assert "gcloud" not in out and f"the bucket folder {where} does not exist" in out, r.output
    assert f"mkdir -p {where}" in out and "bucket" in out.split("→")[1]


def test_storage_advice_names_the_buckets_own_scheme():
    from stacks.cli.common import describe_error
    from trainer.storage import StorageError

    _, hint, code = describe_error(StorageError("no such object", "file:///srv/b/fr/runs/r/model.pth"))
    assert code == 3 and "gcloud" not in hint and "/srv/b/fr/runs/r/model.pth" in hint
    _, hint, code = describe_error(StorageError("no such object", "gs://b/fr/runs/r/model.pth"))
    assert code == 3 and "gcloud auth" in hint
    _, hint, code = describe_error(StorageError("cannot write under /srv", "file:///srv/b", bad_input=True))
    assert code == 2 and "role" not in hint and "bucket" in hint


def test_doctor_reports_a_missing_bucket_folder_as_missing(project, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2**31, 2**31 - 2**29, 2**29))  # 0.5 GiB free
    where = tmp_path / "unmounted" / "bucket"
    r = runner.invoke(app, ["doctor", "--set", f"bucket=file://{where}"])
    out = one_line(r.output)
    assert r.exit_code == 3 and f"problem bucket file://{where}: the folder does not exist" in out, r.output
    assert f"mkdir -p {where}" in out
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    r = runner.invoke(app, ["doctor", "--set", f"bucket=file://{not_a_folder / 'bucket'}"])
    out = one_line(r.output)
    assert r.exit_code == 3 and f"{not_a_folder} is not a folder" in out, r.output


def test_a_bug_says_how_to_get_the_traceback_and_where_to_report_it():
    from stacks.cli.common import describe_error

    message, hint, code = describe_error(ZeroDivisionError("division by zero"))
    assert message == "unexpected ZeroDivisionError: division by zero" and code == 3
    assert "trainctl --debug" in hint and "issue" in hint


def test_debug_is_a_plain_flag_in_the_help_and_on_the_command_line(project):
    r = runner.invoke(app, ["--help"])
    line = next(line for line in r.output.splitlines() if "--debug" in line)
    assert "<bool>" not in line, line
    r = runner.invoke(app, ["--debug", "runs"])
    assert r.exit_code == 0, r.output


def test_resuming_a_run_that_is_not_there_names_a_command_that_lists_the_runs(project, monkeypatch):
    monkeypatch.chdir(project)
    r = runner.invoke(app, ["train", "fr", "--env", "local", "--resume", "20261127-100000-zzzz"])
    assert r.exit_code == 2, r.output
    said = one_line(r.output)
    assert "no run '20261127-100000-zzzz' for fr" in said, said
    hint = said.split("list them: ", 1)[1]
    listed = runner.invoke(app, hint.split()[1:])  # the hint, as typed after `trainctl`
    assert listed.exit_code == 0, (hint, listed.output)
