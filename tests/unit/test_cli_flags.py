"""trainctl's own flags: shell completion, `--debug` anywhere on the line or TRAINCTL_DEBUG, a quick
--help."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from stacks.cli import common
from stacks.cli.main import app
from tests.support.trainctl import TRAINCTL

runner = CliRunner()


@pytest.fixture
def completion_for_a_named_shell(monkeypatch, tmp_path):
    """The shell named on the command line, not guessed from the process tree; its rc files under tmp."""
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_completion_is_shown_and_installed(completion_for_a_named_shell):
    home = completion_for_a_named_shell
    r = runner.invoke(app, ["--show-completion", "bash"], prog_name="trainctl")
    assert r.exit_code == 0, r.output
    assert "_TRAINCTL_COMPLETE=complete_bash" in r.stdout and "complete -o default -F" in r.stdout
    r = runner.invoke(app, ["--install-completion", "bash"], prog_name="trainctl")
    assert r.exit_code == 0, r.output
    assert "_TRAINCTL_COMPLETE" in (home / ".bash_completions" / "trainctl.sh").read_text()
    assert ".bash_completions/trainctl.sh" in (home / ".bashrc").read_text()


def test_the_installed_script_completes_commands_and_options(project):
    """What bash runs on <TAB>: the installed trainctl answers with its commands and a command's options."""

    def complete(words: str) -> list[str]:
        env = {
            **os.environ,
            "_TRAINCTL_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        }
        done = subprocess.run([TRAINCTL], cwd=project, env=env, capture_output=True, text=True, timeout=60)
        return done.stdout.split()

    assert "data" in complete("trainctl da") and "doctor" in complete("trainctl do")
    assert "--json" in complete("trainctl doctor --j")


# Packages that take ~0.1-2 s to import (torch ~1,100 modules, mlflow ~1,700, google-cloud-storage ~500): the
# commands import them inside their bodies, never at a module's top.
HEAVY_PACKAGES = set(
    "torch fastai spacy numpy scipy pandas sklearn matplotlib mlflow "  # training, data, the tracker
    "cdktf constructs jsii google grpc requests httpx".split()  # stacks, cloud clients
)

# `trainctl --help` imports 507 modules today: the CLI's own ~55, typer, rich (with markdown_it, pygments), pydantic,
# yaml and the interpreter's start. 650 leaves room for those libraries' updates and stays under what any networking
# or data library adds at a module's top (requests ~220, httpx ~210, pandas ~540), named above or not.
MODULES_FOR_HELP = 650

HELP_IMPORTS = """
import sys
sys.argv = ["trainctl", "--help"]
from stacks.cli.main import run
try:
    run()
except SystemExit:
    pass
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""


def test_help_stays_quick():
    """Completion runs trainctl on every <TAB>: the commands' imports stay inside the commands.

    Counted in modules, not seconds: a busy machine makes a wall-time limit flaky."""
    done = subprocess.run([sys.executable, "-c", HELP_IMPORTS], capture_output=True, text=True, timeout=120)
    assert "Usage" in done.stdout, done.stderr[-2000:]
    modules = done.stderr.split()
    heavy = sorted({m.split(".")[0] for m in modules if m.split(".")[0] in HEAVY_PACKAGES})
    assert not heavy, f"trainctl --help imports {heavy}"
    assert len(modules) <= MODULES_FOR_HELP, f"trainctl --help imports {len(modules)} modules"


@pytest.fixture
def a_bug_in_status(monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("stacks.cli.runs_cmds.open_env", broken)


@pytest.mark.parametrize(
    "args, env, traceback",
    [
        (["status", "fr"], {}, False),
        (["--debug", "status", "fr"], {}, True),
        (["status", "fr", "--debug"], {}, True),
        (["status", "--debug", "fr"], {}, True),
        (["status", "fr"], {"TRAINCTL_DEBUG": "1"}, True),
        (["status", "fr"], {"TRAINCTL_DEBUG": "0"}, False),
    ],
)
def test_debug_anywhere_on_the_line_or_from_the_environment(
    project, a_bug_in_status, monkeypatch, args, env, traceback
):
    monkeypatch.delenv("TRAINCTL_DEBUG", raising=False)
    r = runner.invoke(app, args, env=env)
    assert r.exit_code == 3, r.output
    assert "unexpected ZeroDivisionError: division by zero" in r.stderr
    assert ("Traceback (most recent call last)" in r.stderr) == traceback, r.stderr


def test_debug_is_decided_in_one_place_and_left_after_a_double_dash(monkeypatch):
    monkeypatch.delenv("TRAINCTL_DEBUG", raising=False)
    assert common.decide_debug(["predict", "fr", "--", "--debug"]) == ["predict", "fr", "--", "--debug"]
    assert common.STATE["debug"] is False
    assert common.decide_debug(["runs", "--debug", "--json"]) == ["runs", "--json"] and common.STATE["debug"]
    monkeypatch.setenv("TRAINCTL_DEBUG", "true")
    assert common.decide_debug(["runs"]) == ["runs"] and common.STATE["debug"]
    common.decide_debug([])  # as the next command starts
    monkeypatch.delenv("TRAINCTL_DEBUG")
    assert common.decide_debug([]) == [] and common.STATE["debug"] is False
