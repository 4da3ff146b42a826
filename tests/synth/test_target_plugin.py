"""A third target is one package plus one registry line: the shelf target (tests/fixtures/plugins/shelftarget,
outside the tree) loads its own settings, synthesizes a training stack, adds its own command and answers doctor,
with no other file edited. Its whole run: tests/e2e/test_target_plugin.py."""

from __future__ import annotations

import ast
import json

import pytest

from tests.support.plugin_target import PACKAGE, PLUGINS, REGISTRY_LINE, shelf_env, trainctl_with_shelf

# What a target from outside may use of the tree: the interface and its defaults, the CDK's names, the shared
# constructs, the trainer's command line and storage, the config's base model, the errors and checks it raises.
PUBLIC = (
    "stacks.targets.base",
    "stacks.targets.checks",
    "stacks.cdk",
    "stacks.constructs",
    "stacks.config.trainer_command",
    "stacks.config.strict",
    "stacks.errors",
    "trainer.storage",
)


@pytest.fixture
def shelf(project, tmp_path):
    return shelf_env(project, tmp_path / "shelf")


def test_the_target_is_its_package_and_one_registry_line():
    """Everything of the shelf is in its package; of the tree it uses the public modules only, so adding it
    edits nothing but the registry, by one line."""
    used = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                used.add(node.module)
            elif isinstance(node, ast.Import):
                used.update(alias.name for alias in node.names)
    ours = {m for m in used if m.split(".")[0] in ("stacks", "trainer", "tests")}
    assert ours and all(m.startswith(PUBLIC) for m in ours), sorted(ours - {m for m in ours if m.startswith(PUBLIC)})


def test_its_env_loads_its_own_settings_and_refuses_another_targets(project, shelf):
    r = trainctl_with_shelf(project, "config", "show", "--env", "shelf", "--json", "--set", "languages.fr.shelf.nice=3")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["target"], doc["languages"]["fr"]["shelf"], doc["languages"]["en"]["shelf"]) == (
        "shelf",
        {"nice": 3},
        {"nice": 0},
    )
    assert not {"gcp", "local"} & set(doc["languages"]["fr"]) and not {"gcp", "local"} & set(doc)

    for sets, said in (
        (
            ["defaults.gcp.machine_type=g2-standard-8"],
            "defaults.gcp: settings of target gcp, but the env's target is shelf",
        ),
        (["languages.fr.shelf.nice=40"], "languages.fr.shelf.nice: Input should be less than or equal to 19"),
        (["bucket=file:///tmp/x"], "bucket must be a shelf:// URI for target 'shelf'"),
    ):
        r = trainctl_with_shelf(project, "config", "show", "--env", "shelf", *[a for s in sets for a in ("--set", s)])
        assert r.returncode == 2 and said in r.stderr, r.stderr


def test_it_synthesizes_a_training_stack_with_the_shared_outputs(project, shelf):
    r = trainctl_with_shelf(project, "synth", "--env", "shelf")
    assert r.returncode == 0, r.stderr
    doc = json.loads((project / "cdktf.out" / "stacks" / "train-fr" / "cdk.tf.json").read_text())
    assert set(doc["output"]) == {"run_id", "lang", "env"} and doc["output"]["env"]["value"] == "shelf"
    assert list(doc["resource"]) == ["terraform_data"]
    [record] = doc["resource"]["terraform_data"].values()
    [create, destroy] = record["provisioner"]
    assert "shelftarget.launcher start" in create["local-exec"]["command"]
    assert "--nice 0" in create["local-exec"]["command"] and destroy["local-exec"]["when"] == "destroy"


def test_it_adds_its_command_and_answers_doctor(project, shelf):
    hello = trainctl_with_shelf(project, "shelf-where", "--env", "shelf")
    assert hello.returncode == 0 and f"shelf of shelf: {shelf}" in hello.stdout, hello.stdout + hello.stderr
    doctor = trainctl_with_shelf(project, "doctor", "--env", "shelf", "--json")
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    assert (report["target"], [c["name"] for c in report["checks"]], report["ok"]) == (
        "shelf",
        [f"shelf {shelf}"],
        True,
    )


def test_an_unregistered_target_names_the_registered_ones(project):
    from stacks.errors import ConfigError
    from stacks.project import Project

    with pytest.raises(ConfigError, match=r"no target 'k8s': expected one of local, gcp"):
        Project(project).load("local", ["target=k8s"])


def test_a_saved_plan_of_the_shelf_is_described_by_the_shelf(monkeypatch):
    from stacks.config import targets
    from stacks.plan_render.parse import plan_from_document
    from stacks.plan_render.summary import training_lines

    monkeypatch.syspath_prepend(str(PLUGINS))
    namespace = {"TARGETS": dict(targets.TARGETS), "TargetEntry": targets.TargetEntry}
    exec(REGISTRY_LINE, namespace)
    monkeypatch.setattr(targets, "TARGETS", namespace["TARGETS"])
    doc = {
        "trainstack": {"env": "shelf", "stack": "train-fr", "target": "shelf"},
        "resource_changes": [
            {"address": "terraform_data.run", "type": "terraform_data", "change": {"actions": ["create"], "after": {}}}
        ],
    }
    plan = plan_from_document(doc, env="shelf", stack="train-fr", source="x")
    assert training_lines([plan]) == ["- `shelf` · `train-fr`: runs on a shelf of this machine (target shelf)"]
