"""Rehearsing a configuration as a user does: `python -m stacks.targets.gcp.sim serve` in one process, the
variables it prints, then `trainctl quota` against it (the real preflight, the real google-cloud-compute
client). About 5 s: one server process and one in-process trainctl."""

from __future__ import annotations

import signal
import subprocess
import sys

import yaml
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.targets.gcp.sim.scenario import DEFAULT_SCENARIO
from tests.support.project import REPO


def test_serve_prints_only_simulated_lines_and_trainctl_quota_rehearses_the_preflight_on_it(
    project, tmp_path, monkeypatch
):
    scenario = yaml.safe_load(DEFAULT_SCENARIO.read_text())
    scenario["zones"]["europe-west4-a"]["accelerators"] = ["nvidia-tesla-t4"]  # no L4 in the first zone
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    server = subprocess.Popen(
        [sys.executable, "-m", "stacks.targets.gcp.sim", "serve", "--scenario", str(path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = [server.stdout.readline() for _ in range(5)]
        assert all("simulated" in line for line in lines), lines
        exports = dict(
            line.split(" ", 1)[1].split("  #")[0].split("=", 1) for line in lines if line.startswith("export")
        )
        assert set(exports) == {
            "TRAINSTACK_COMPUTE_ENDPOINT",
            "TRAINSTACK_CLOUDQUOTAS_ENDPOINT",
            "TRAINSTACK_CLOUDBILLING_ENDPOINT",
        }
        for name, value in exports.items():
            monkeypatch.setenv(name, value)
        result = CliRunner().invoke(app, ["quota", "--env", "dev", "--set", "gcp.project=p1", "--lang", "fr"])
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())
        assert "nvidia-l4 not offered in europe-west4-a" in text
        assert "train-fr → europe-west4-b (PREEMPTIBLE_NVIDIA_L4_GPUS)" in text
    finally:
        # SIGTERM: a SIGINT this process inherited as ignored (nohup, a background job) stays ignored in the server
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=300)  # a guard against a hang, sized for a busy machine
    assert server.returncode == 0 and out.strip().splitlines()[-1] == "simulated Google Cloud: stopped"


def test_a_simulated_env_starts_its_own_cloud_and_never_names_another_project(tmp_path):
    """`trainctl quota --env gcp-sim`: the command starts the simulated cloud (a scenario key changed by --set),
    asks it, and stops it; a project other than the scenario's is refused before anything is asked. About 10 s:
    two trainctl processes."""
    from tests.support.project import make_project
    from tests.support.trainctl import trainctl

    root = make_project(tmp_path / "proj")
    no_l4 = "gcp.simulated.overrides.zones.europe-west4-a.accelerators=[nvidia-tesla-t4]"
    r = trainctl(root, "quota", "--env", "gcp-sim", "--set", no_l4, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "train-fr → europe-west4-b (PREEMPTIBLE_NVIDIA_L4_GPUS)" in r.stdout  # the first zone lacks the L4
    sim_lines = r.stderr.strip().splitlines()
    assert sim_lines[0].startswith("simulated Google Cloud at http://127.0.0.1:")
    assert sim_lines[-1] == "simulated Google Cloud: stopped, its VMs with it"
    assert all("simulated" in line for line in sim_lines), sim_lines

    other = trainctl(root, "quota", "--env", "gcp-sim", "--set", "gcp.project=my-real-project", timeout=120)
    assert other.returncode == 2, other.stdout + other.stderr
    assert "gcp.project is 'my-real-project' but the simulated cloud's scenario" in other.stderr
    assert "http://127.0.0.1" not in other.stderr  # refused before any cloud started


def test_the_address_of_a_served_cloud_whose_process_is_gone_is_removed_and_the_command_starts_its_own(tmp_path):
    """`.trainstack/gcp-sim/simulated-cloud.json` left by a `serve` that was killed (its pid gone): a command says so,
    removes it and starts its own simulated cloud, as without one. About 5 s: one trainctl process."""
    import json

    from tests.support.project import make_project
    from tests.support.trainctl import trainctl

    root = make_project(tmp_path / "proj")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    served = root / ".trainstack/gcp-sim/simulated-cloud.json"
    served.parent.mkdir(parents=True)
    served.write_text(json.dumps({"pid": gone.pid, "url": "http://127.0.0.1:9", "storage_url": "http://127.0.0.1:9"}))
    r = trainctl(root, "quota", "--env", "gcp-sim", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert f"named a served cloud, but pid {gone.pid} is gone: removed; this command starts its own" in lines[0], lines
    assert lines[1].startswith("simulated Google Cloud at http://127.0.0.1:"), lines
    assert not served.exists()
