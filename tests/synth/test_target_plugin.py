"""A third target is one package plus one registry line: a dummy target from its own package (outside this tree)
deploys a training stack, adds its own command and answers doctor, with no other file edited."""

from __future__ import annotations

import inspect
import json
import sys
import textwrap

import pytest
import typer
from typer.testing import CliRunner

from tests.support.project import make_project

# The dummy's package: what docs/design.md ("Adding a target") asks for, and nothing else.
DUMMY_TARGET = '''
    """A target that runs nothing: the trainer is a terraform_data record, the bucket a folder."""
    from dataclasses import dataclass
    from functools import partial
    from typing import Annotated

    import typer


    def add_dummy_part(stack, *, config, lang, state_file):
        from stacks.cdk import LocalBackend
        from stacks.constructs.run_identity import RunIdentity

        LocalBackend(stack, path=state_file)
        return RunIdentity(stack, "run", run_id=stack.run_id_expression,
                           replace_on=stack.run_id_var.string_value).run_id


    @dataclass(frozen=True)
    class DummyTarget:
        name: str = "dummy"
        status_appear_timeout_s: float = 60
        poll_s: float = 1.0
        stacks_before_training: tuple = ()
        runs_side_by_side: bool = True

        def preflight_together(self, config, langs, reporter): return {}
        def training_part(self, config, project, lang, *, python, placement):
            return partial(add_dummy_part, config=config, lang=lang,
                           state_file=str(project.state_file(config.env, "train-" + lang)))
        def before_training(self, app, config, name): raise ValueError(name)
        def left_out_of_app(self, config): return {}
        def register_commands(self, app, kit):
            @app.command("dummy-hello")
            def hello(env: kit.env_option = "local", sets: kit.set_option = None):
                """Say which target an env has."""
                _, config = kit.load(env, sets)
                kit.console.print(f"hello from {config.target}: {', '.join(config.languages)}")
        def preflight(self, config, lang, reporter, decided=None): return None
        def placements(self, config, lang, reporter, first=None): return [None]
        def describe_placement(self, placement): return "nowhere"
        def placement_of_run(self, config, lang, bucket, run_id): return None
        def capacity_retry_s(self, config): return (1.0, 1.0)
        def vm_running(self, project, config, lang, run_id, placement): return None
        def estimate(self, config, lang, bucket, reporter): return None
        def waiting_note(self, config, lang, placement): return None
        def require_artifacts(self, config): return None
        def creation_errors(self, config, lang, reporter, *, placement=None, bucket=None, run_id=None, project=None):
            return None
        def launcher_alive(self, project, env, run_id): return None
        def run_cost(self, bucket, config, lang, run_id, status): return {}
        def cost_note(self, cost): return None
        def run_metadata(self, config, lang, placement, bucket): return {}
        def prices_for_plan(self, config): return None
        def quote_plan(self, plan, book): return None
        def plan_line(self, plan): return "runs nowhere (target dummy)" if plan.stack.startswith("train-") else None
        def doctor(self, config, echo):
            from stacks.targets.checks import Check

            check = Check("dummy reachable", True, "always")
            echo(check)
            return [check], "nothing else"
        def runs_outlive_command(self, config): return True
        def start_session(self, config, project): return None
        def stack_runner(self, config, workdir, stack, echo=None):
            from stacks.terraform import Terraform

            return Terraform(workdir, stack, echo=echo)
        def check_config(self, config, origin):
            from stacks.errors import ConfigError

            if "xx" in config.languages:
                raise ConfigError("the dummy target has no language xx", hint="drop languages.xx")


    DUMMY = DummyTarget()
'''


@pytest.fixture
def dummy(tmp_path, monkeypatch):
    """The dummy's package on sys.path, its registry line in stacks/config/targets.py, an env that names it."""
    from stacks.config import targets

    package = tmp_path / "plugins" / "dummytarget"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "target.py").write_text(textwrap.dedent(DUMMY_TARGET))
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.setitem(targets.TARGETS, "dummy", targets.TargetEntry("file", "dummytarget.target:DUMMY"))
    root = make_project(tmp_path / "proj")
    (root / "envs" / "dummy.yaml").write_text("target: dummy\nbucket: file://.trainstack/dummy/bucket\n")
    monkeypatch.chdir(root)
    monkeypatch.delenv("TRAINCTL_ENV", raising=False)
    yield root
    sys.modules.pop("dummytarget.target", None)
    sys.modules.pop("dummytarget", None)


def test_the_dummy_implements_every_method_the_interface_names(dummy):
    from stacks.targets import Target, by_name

    target = by_name("dummy")
    wanted = {name for name, _ in inspect.getmembers(Target) if not name.startswith("_")} | set(Target.__annotations__)
    assert wanted - set(dir(target)) == set()
    assert {"training_part", "register_commands", "plan_line", "doctor"} <= wanted


def test_a_dummy_env_loads_and_its_target_checks_it(dummy):
    from stacks.errors import ConfigError
    from stacks.project import Project

    config = Project(dummy).load("dummy")
    assert (config.target, sorted(config.languages)) == ("dummy", ["en", "fr"])
    with pytest.raises(ConfigError, match="no language xx"):
        Project(dummy).load("dummy", ["languages.xx={}"])
    with pytest.raises(ConfigError, match=r"bucket must be a file:// URI for target 'dummy'"):
        Project(dummy).load("dummy", ["bucket=gs://b"])


def test_an_unregistered_target_names_the_registered_ones(project):
    from stacks.errors import ConfigError
    from stacks.project import Project

    with pytest.raises(ConfigError, match=r"no target 'k8s': expected one of local, gcp"):
        Project(project).load("local", ["target=k8s"])


def test_the_dummy_synthesizes_a_training_stack_with_the_shared_outputs(dummy):
    from stacks.app import synth
    from stacks.project import Project

    project = Project(dummy)
    names = synth(project.load("dummy"), project, dummy / "out")
    doc = json.loads((dummy / "out" / "stacks" / "train-fr" / "cdk.tf.json").read_text())
    assert names == ["train-en", "train-fr"]
    assert set(doc["output"]) == {"run_id", "lang", "env"}
    assert doc["output"]["lang"]["value"] == "fr" and doc["output"]["env"]["value"] == "dummy"
    assert list(doc["resource"]) == ["terraform_data"]
    assert doc["terraform"]["backend"]["local"]["path"].endswith("train-fr.tfstate")


def test_the_dummy_registers_its_command_and_answers_doctor(dummy):
    from stacks.cli.main import register_target_commands

    app = typer.Typer()

    @app.callback()
    def _root():
        """trainctl (the commands every target registers)"""

    register_target_commands(app)
    runner = CliRunner()
    hello = runner.invoke(app, ["dummy-hello", "--env", "dummy"])
    assert hello.exit_code == 0, hello.output
    assert "hello from dummy: fr, en" in hello.stdout

    from stacks.cli.main import app as trainctl

    doctor = runner.invoke(trainctl, ["doctor", "--env", "dummy", "--json"])
    assert doctor.exit_code == 0, doctor.output
    report = json.loads(doctor.stdout)
    assert (report["target"], [c["name"] for c in report["checks"]], report["ok"]) == (
        "dummy",
        ["dummy reachable"],
        True,
    )


def test_a_saved_plan_of_the_dummy_is_described_by_the_dummy(dummy):
    from stacks.plan_render.parse import plan_from_document
    from stacks.plan_render.summary import training_lines

    doc = {
        "trainstack": {"env": "dummy", "stack": "train-fr", "target": "dummy"},
        "resource_changes": [
            {"address": "terraform_data.run", "type": "terraform_data", "change": {"actions": ["create"], "after": {}}}
        ],
    }
    plan = plan_from_document(doc, env="dummy", stack="train-fr", source="x")
    assert training_lines([plan]) == ["- `dummy` · `train-fr`: runs nowhere (target dummy)"]
