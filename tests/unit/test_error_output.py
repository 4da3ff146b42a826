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


def every_command(typer_app, path=()):
    """(words after `trainctl`, the typer record whose callback runs) of every command, the target's too; a group
    that runs on its own (`runs`) is one."""
    for info in typer_app.registered_commands:
        yield [*path, info.name], info
    for group in typer_app.registered_groups:
        sub = group.typer_instance
        if sub.registered_callback is not None and sub.registered_callback.invoke_without_command:
            yield [*path, group.name], sub.registered_callback
        yield from every_command(sub, [*path, group.name])


def words_to_reach(root, words: list[str]) -> list[str]:
    """`words` and a value for every argument and option the command requires (a run id fits every one)."""
    command = root
    for word in words:
        command = command.commands[word]
    return words + [
        part
        for param in command.params
        if param.required
        for part in (["20261127-100000-abcd"] if param.param_type_name == "argument" else [param.opts[0], "x"])
    ]


def test_an_unexpected_error_in_any_command_is_told_once_at_the_root_its_traceback_with_debug(monkeypatch):
    import functools

    import typer

    from stacks.cli.main import app

    def failing(callback):
        @functools.wraps(callback)  # the same signature: the command parses its own line as it does
        def failed(*args, **kwargs):
            raise ZeroDivisionError("division by zero")

        return failed

    commands = list(every_command(app))
    assert {"train", "destroy", "runs export", "runs", "quota", "image build"} <= {" ".join(w) for w, _ in commands}
    told = error_text(
        "unexpected ZeroDivisionError: division by zero",
        "rerun as `trainctl --debug …` for the traceback, and report it with that output as an issue in the "
        "trainstack repository",
    )
    root = typer.main.get_command(app)
    for words, info in commands:
        line = words_to_reach(root, words)
        with monkeypatch.context() as patch:
            patch.setattr(info, "callback", failing(info.callback))
            r = CliRunner().invoke(app, line)
            assert (r.exit_code, r.stderr) == (3, told + "\n"), (line, r.output)
            r = CliRunner().invoke(app, [*line, "--debug"])
        assert r.exit_code == 3, (line, r.output)
        trace, said = r.stderr.split("ZeroDivisionError: division by zero\n", 1)
        assert trace.startswith("Traceback (most recent call last):") and said == told + "\n", (line, r.stderr)


def test_ctrl_c_in_a_command_is_one_word_and_exit_130(monkeypatch):
    from stacks.cli.main import app
    from stacks.project import Project

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(Project, "discover", interrupted)
    r = CliRunner().invoke(app, ["runs"])
    assert (r.exit_code, r.stderr) == (130, "interrupted\n"), r.output
