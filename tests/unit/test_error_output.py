"""An error reads alike whichever side prints it (trainctl, the cdktf app, a trainer process), and the operator
side gives every exit status by its name (docs/design.md's table), never as a bare number."""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from stacks.errors import TrainstackError, UnknownLanguageError
from tests.support.project import REPO
from trainer.errors import error_text


def test_trainctl_the_cdktf_app_and_a_trainer_print_an_error_in_one_shape(project, monkeypatch, capsys, tmp_path):
    from stacks import app as cdktf_app
    from stacks.cli.main import app
    from trainer.jobs.harness import run_job
    from trainer.runfiles.status_file import SUCCEEDED, RunStatus, write_status
    from trainer.storage import open_bucket

    known = UnknownLanguageError("de", "local", ["en", "fr"])
    r = CliRunner().invoke(app, ["train", "de"])
    assert (r.exit_code, r.stderr) == (2, error_text(known.message, known.hint) + "\n")

    def refused():
        raise TrainstackError("envs/local.yaml: bucket is not a URI", hint="write it as file:///PATH or gs://NAME")

    monkeypatch.setattr(cdktf_app.Project, "discover", refused)
    with pytest.raises(SystemExit) as ended:
        cdktf_app.main()
    assert ended.value.code == 2
    assert (
        capsys.readouterr().err
        == error_text("envs/local.yaml: bucket is not a URI", "write it as file:///PATH or gs://NAME") + "\n"
    )

    bucket = open_bucket(f"file://{tmp_path / 'bucket'}")
    write_status(bucket, RunStatus("r1", "fr", "local", state=SUCCEEDED, stage="done"))
    args = SimpleNamespace(
        bucket=f"file://{tmp_path / 'bucket'}", lang="fr", run_id="r1", env="local", job="classifier"
    )
    assert run_job(args) == 2
    assert (
        capsys.readouterr().out
        == error_text("run r1 already ended (SUCCEEDED); its files are kept as they are", "start a new run id") + "\n"
    )


def test_an_error_without_a_hint_is_one_line():
    assert error_text("GITHUB_TOKEN is not set") == "error: GITHUB_TOKEN is not set"
    assert error_text("no data", "push it").splitlines() == ["error: no data", "  → push it"]


def bare_exit_statuses(path, root=REPO) -> list[tuple[str, int]]:
    """Where `path` gives an exit status as a number: typer.Exit(2), sys.exit(3), SystemExit(1), fail(..., 2),
    or a `main` (a module's entry point: its value becomes the process's status) returning one."""

    def number(node) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            given = [*node.args[-1:], *(k.value for k in node.keywords if k.arg == "code")]
            if name in ("Exit", "exit", "SystemExit", "fail") and any(number(arg) for arg in given):
                found.add((str(path.relative_to(root)), node.lineno))
        elif isinstance(node, ast.FunctionDef) and node.name == "main":
            found |= {
                (str(path.relative_to(root)), ret.lineno)
                for ret in ast.walk(node)
                if isinstance(ret, ast.Return) and number(ret.value)
            }
    return sorted(found)


def test_the_operator_side_names_every_exit_status():
    bare = [where for path in sorted((REPO / "stacks").rglob("*.py")) for where in bare_exit_statuses(path)]
    assert not bare, f"exit statuses as bare numbers (use stacks.errors.ExitStatus): {bare}"


def test_the_bare_status_finder_finds_each_form(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import sys, typer\n"
        "def main():\n    if sys.argv:\n        return 2\n    return ExitStatus.SUCCESS\n"
        "def other():\n    raise typer.Exit(code=3)\n"
        "def third():\n    fail('x', None, 2)\n    sys.exit(ExitStatus.INFRA_ERROR)\n    return 1\n"
    )
    assert bare_exit_statuses(module, tmp_path) == [("m.py", 4), ("m.py", 7), ("m.py", 9)]  # not third's return
