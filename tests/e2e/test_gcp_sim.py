"""`trainctl train fr --env gcp-sim`: the gcp target's whole run on the simulated Google Cloud trainctl starts for
the command (stacks/targets/gcp/sim/): the real preflight (quota, image, boot image, the Billing Catalog's
prices), the real synthesized training stack applied and destroyed in the sim, the real VM agent and a tiny
trainer on each simulated VM, the bucket in a Cloud Storage emulator.

The overlay's scenario: europe-west4-a dry for good, europe-west4-b preempted once the classifier has trained an
epoch (dry after it), europe-west4-c with room; the fallback zones europe-west1-b (one L4 of quota) and
europe-west1-c (no L4) are never reached.

Cost: one tiny training plus three trainctl processes; 251 s, 335 s and 502 s measured on the 2 shared cores at
load 7, 14 and 18 (most of it the trainer's and the tokenizer check's imports, as in the local market's tests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.project import SAMPLE, TINY_SETS, make_project
from tests.support.trainctl import trainctl

ENV = "gcp-sim"
QUICK = ["--env", ENV, *TINY_SETS]


def _processes_of(root: Path) -> list[int]:
    """Processes (ours) whose environment names the project's simulated VMs' folder: agents, trainers."""
    mark = str(root / ".trainstack" / ENV / "simulated-vms").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone, or not ours
            continue
    return found


@pytest.fixture
def gcp_sim(tmp_path):
    root = make_project(tmp_path / "proj")
    r = trainctl(root, "data", "push", "fr", str(SAMPLE / "fr"), "--env", ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "simulated Google Cloud at http://127.0.0.1:" in r.stderr  # a bucket in the sim's Cloud Storage
    return root


def test_a_dry_zone_and_a_preemption_move_the_run_on_the_gcp_code_path(gcp_sim):
    r = trainctl(gcp_sim, "train", "fr", *QUICK, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    # the real preflight, answered by the sim
    assert "quota ok: fr runs in europe-west4-a (PREEMPTIBLE_NVIDIA_L4_GPUS)" in out
    assert "boot image (fr, g2-standard-8) ok" in out and "estimated cost of 1 x g2-standard-8 (Spot" in out
    # the real stack, applied by the simulated apply in each zone it moved to
    applied = [line.split(" in ")[1].split(",")[0] for line in out.splitlines() if "simulated apply of" in line]
    assert applied == ["europe-west4-a", "europe-west4-b", "europe-west4-c"], out
    assert "moved to zone europe-west4-b" in out and "moved to zone europe-west4-c" in out
    assert "was interrupted in zone europe-west4-b" in out and "training again in zone europe-west4-c" in out

    # the stack Terraform would be handed (cdktf deploy by hand) meets only the sim, gone with the command
    stack = json.loads((gcp_sim / f".trainstack/{ENV}/cdktf.out/stacks/train-fr/cdk.tf.json").read_text())
    [provider] = stack["provider"]["google"]
    assert provider["access_token"] == "simulated" and provider["compute_custom_endpoint"].startswith(
        "http://127.0.0.1:"
    )
    assert list(stack["terraform"]["backend"]) == ["local"]

    [row] = json.loads(trainctl(gcp_sim, "runs", "--json", "--env", ENV).stdout)
    assert row["state"] == "SUCCEEDED"
    assert row["placements"] == ["europe-west4-a", "europe-west4-b", "europe-west4-c"]
    assert row["ran_in"] == ["europe-west4-b", "europe-west4-c"] and row["preemptions"] == 1
    assert "europe-west1-c" not in row["placements"]  # no L4 there
    # priced per placement: two boots, each at the Spot rate of the scenario's catalogue (0.4512 USD/h)
    assert row["vm_boots"] == 2 and row["vm_per_hour"] == pytest.approx(0.4512, abs=1e-3)
    assert row["est_cost"] == pytest.approx(row["billed_vm_s"] / 3600 * 0.4512, rel=0.05)

    # nothing left: the stack destroyed in the sim, the sim stopped with the command, no agent or trainer
    assert out.rstrip().endswith("simulated Google Cloud: stopped, its VMs with it"), out[-500:]
    assert "train-fr destroyed, nothing left running" in out
    assert _processes_of(gcp_sim) == []
    # every line the sim printed says so
    sim_lines = [line for line in r.stderr.splitlines() if "VM " in line and "agent" in line]
    assert sim_lines and all("simulated" in line for line in sim_lines)
