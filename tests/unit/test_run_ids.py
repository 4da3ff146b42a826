"""Run ids are checked where they enter: every command that takes one, and the trainer's --run-id, refuse an
id that is empty, path-like, too long or another language's, with one error and exit 2, and the bucket (the
fr run's status and log above all) is left as it was."""

from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

from stacks.cli.main import app
from tests.support.project import SAMPLE
from tests.support.runs import fake_run, write
from trainer.cli import build_parser

runner = CliRunner()
FAILED_FR, SUCCEEDED_FR = "20260101-100000-dead", "20260102-100000-beef"


def bucket_root(project):
    return project / ".trainstack" / "local" / "bucket"


def bucket_files(project) -> dict[str, bytes]:
    root = bucket_root(project)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def two_languages(project):
    """A FAILED and a SUCCEEDED fr run, en's data staged (so `train en` gets past its data check)."""
    root = bucket_root(project)
    fake_run(root, "fr", FAILED_FR, f1={"a": 0.5, "b": 0.5}, state="FAILED")
    write(root, f"fr/runs/{FAILED_FR}/log.txt", b"2026-01-01T10:00:00Z FAILED: out of memory\n")
    fake_run(root, "fr", SUCCEEDED_FR, f1={"a": 0.8, "b": 0.7}, rows=[(0, "x", "a", "a")])
    assert runner.invoke(app, ["data", "push", "en", str(SAMPLE / "fr")]).exit_code == 0
    return project


def hostile_ids(project) -> dict[str, str]:
    return {
        "traversal": f"../../fr/runs/{FAILED_FR}",
        "traversal to a finished run": f"../../fr/runs/{SUCCEEDED_FR}",
        "absolute": str(bucket_root(project) / "fr" / "runs" / FAILED_FR),
        "empty": "",
        "dot": ".",
        "NUL": f"{FAILED_FR}\x00",
        "line end": f"{FAILED_FR}\n",
        "very long": "2026" * 200,
        "another language's": FAILED_FR,  # a fr run, given to an en command
    }


# Every command that takes a run id, as the user types it: RUN is where the id goes. The key is the
# command's parameter, so a command that gains a run id without a line here fails the coverage test.
COMMANDS = {
    ("train", "resume"): ["train", "en", "--detach", "--resume", "RUN"],
    ("status", "run"): ["status", "en", "--run", "RUN"],
    ("logs", "run"): ["logs", "en", "--run", "RUN"],
    ("predict", "run"): ["predict", "en", "--run", "RUN", "un texte"],
    ("promote", "run_id"): ["promote", "en", "RUN"],
    ("runs show", "run_id"): ["runs", "show", "RUN", "--lang", "en"],
    ("runs compare", "run_a"): ["runs", "compare", "RUN", SUCCEEDED_FR],
    ("runs compare", "run_b"): ["runs", "compare", SUCCEEDED_FR, "RUN"],
    ("runs export", "run_ids"): ["runs", "export", "en", "RUN"],
    ("zones", "run"): ["zones", "en", "--run", "RUN"],
}


def run_id_parameters() -> set[tuple[str, str]]:
    """(command, parameter) of every trainctl parameter that names a run."""
    found = set()

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))
        for param in getattr(command, "params", []):
            if re.fullmatch(r"run(_id|_ids|_a|_b)?|resume", param.name):
                found.add((" ".join(path), param.name))

    walk(typer.main.get_command(app), ())
    return found


def test_every_command_that_takes_a_run_id_is_fed_the_hostile_ids():
    assert run_id_parameters() == set(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
def test_a_hostile_run_id_is_refused_and_the_bucket_is_untouched(two_languages, command):
    project = two_languages
    before = bucket_files(project)
    for what, run_id in hostile_ids(project).items():
        if what == "another language's" and command[0] == "runs compare":
            continue  # compare takes runs of any language
        args = [run_id if arg == "RUN" else arg for arg in COMMANDS[command]]
        r = runner.invoke(app, args, env={"COLUMNS": "400"})
        said = f"{what}: {' '.join(map(repr, args))} -> exit {r.exit_code}:\n{r.output}"
        assert r.exit_code == 2, said
        assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), said
        assert len(re.findall(r"^error:", r.output, re.M)) == 1 and "→" in r.output, said
        assert bucket_files(project) == before, f"the bucket changed after {said}"


def test_resume_of_an_empty_id_never_starts_a_new_run(two_languages):
    r = runner.invoke(app, ["train", "en", "--detach", "--resume", ""])
    assert r.exit_code == 2 and "--resume: the run id is empty" in r.output
    assert not (bucket_root(two_languages) / "en" / "runs").exists()


@pytest.mark.parametrize("run_id", ["../fr/runs/x", "/tmp/x", "", ".", "a/b", "a\x00b", "a b", "x" * 64])
def test_the_trainer_refuses_a_run_id_that_is_no_run_id(run_id, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--lang", "fr", "--bucket", "file:///b", "--run-id", run_id])
    assert exit_.value.code == 2
    assert "argument --run-id:" in capsys.readouterr().err


@pytest.mark.parametrize("run_id", ["20260101-100000-abcd", "r", "run-fr", "A_1", "x" * 63])
def test_the_trainer_takes_a_run_id_of_the_form(run_id):
    args = build_parser().parse_args(["--lang", "fr", "--bucket", "file:///b", "--run-id", run_id])
    assert args.run_id == run_id
