"""Synthesized local stacks: shape, determinism, validity for the real terraform."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.project import REPO, make_project


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    """Synthesize env local once for the module (jsii start-up is the slow part)."""
    from stacks.app import synth
    from stacks.project import Project

    root = make_project(tmp_path_factory.mktemp("synth") / "proj")
    project = Project(root)
    config = project.load("local")
    names = synth(config, project, root / "out1")
    synth(config, project, root / "out2")
    return root, names


def stack_json(root: Path, out: str, name: str) -> dict:
    return json.loads((root / out / "stacks" / name / "cdk.tf.json").read_text())


def test_one_train_stack_per_language(synthesized):
    _, names = synthesized
    assert names == ["train-en", "train-fr"]


def test_local_stack_is_terraform_data_with_both_provisioners(synthesized):
    root, _ = synthesized
    doc = stack_json(root, "out1", "train-fr")
    assert "provider" not in doc and "required_providers" not in doc.get("terraform", {})
    (res,) = doc["resource"]["terraform_data"].values()
    create, destroy = (p["local-exec"] for p in res["provisioner"])
    assert "trainer.launchers.local.supervisor start" in create["command"] and "--lang fr" in create["command"]
    assert "--cores 0 --cores-dir" in create["command"]  # pinned to cores the project's local runs share
    assert "--run-id '${self.output.run_id}'" in create["command"]
    assert destroy["when"] == "destroy" and "trainer.launchers.local.supervisor stop" in destroy["command"]
    assert res["triggers_replace"] == {"run_id": "${var.run_id}"}
    assert doc["terraform"]["backend"]["local"]["path"] == str(root / ".trainstack/local/state/train-fr.tfstate")
    assert doc["variable"]["run_id"]["default"] == ""
    assert set(doc["output"]) == {"run_id", "lang", "env"}


def test_language_settings_reach_the_trainer(synthesized):
    root, _ = synthesized
    en = stack_json(root, "out1", "train-en")
    (res,) = en["resource"]["terraform_data"].values()
    assert "--lang en" in res["provisioner"][0]["local-exec"]["command"]
    assert "--emb-sz 200" in res["provisioner"][0]["local-exec"]["command"]


def test_synth_is_deterministic(synthesized):
    root, names = synthesized
    for name in names:
        a = (root / "out1" / "stacks" / name / "cdk.tf.json").read_bytes()
        b = (root / "out2" / "stacks" / name / "cdk.tf.json").read_bytes()
        assert a == b


def test_real_terraform_validates_the_stack(synthesized, tmp_path):
    root, _ = synthesized
    work = tmp_path / "tf"
    work.mkdir()
    shutil.copy(root / "out1" / "stacks" / "train-fr" / "cdk.tf.json", work)
    env = {**os.environ, "TF_IN_AUTOMATION": "1"}
    # init without the backend: validate needs no state, and nothing is downloaded.
    subprocess.run(
        ["terraform", "init", "-backend=false", "-input=false"], cwd=work, env=env, check=True, capture_output=True
    )
    out = subprocess.run(["terraform", "validate", "-json"], cwd=work, env=env, capture_output=True, text=True)
    assert json.loads(out.stdout)["valid"] is True, out.stdout


def test_cdktf_cli_synth_matches_trainctl_synth(synthesized, tmp_path):
    """`cdktf synth` (npm cdktf-cli 0.21.0) runs the same app through cdktf.json."""
    cdktf = REPO / "node_modules" / ".bin" / "cdktf"
    assert cdktf.exists(), "cdktf-cli missing: run `make test` (it runs npm ci) instead of pytest directly"
    root, names = synthesized
    import sys

    env = {
        **os.environ,
        "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "CHECKPOINT_DISABLE": "1",
        "CI": "1",
        "TRAINCTL_ENV": "local",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "18,20",
    }
    out = subprocess.run(
        [str(cdktf), "synth", "--output", str(root / "cdk-cli-out")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for name in names:
        assert stack_json(root, "cdk-cli-out", name) == stack_json(root, "out1", name)


def test_local_synth_never_loads_the_google_provider(tmp_path):
    """The google provider's assembly costs ~10 s to load: the local target must not pay it."""
    import sys

    root = make_project(tmp_path / "proj")
    code = (
        "import sys\nfrom stacks.app import synth\nfrom stacks.project import Project\n"
        "from pathlib import Path\nproject = Project(Path.cwd())\nsynth(project.load('local'), project, "
        "project.root / 'out')\n"
        "from stacks.cdk import KIND\n"
        "google = ('cdktf_cdktf_provider_google', 'cdktn_provider_google', 'stacks.targets.gcp.')\n"
        "settings = 'stacks.targets.gcp.settings'  # the env model's `gcp:` block: pydantic only\n"
        "print(KIND, sorted(m for m in sys.modules if m.startswith(google) and m != settings))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    kind, loaded = done.stdout.split(" ", 1)
    assert kind in ("cdktf", "cdktn") and loaded.strip() == "[]"
    assert (root / "out" / "stacks" / "train-fr" / "cdk.tf.json").is_file()
