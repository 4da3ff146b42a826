"""`trainctl train fr --env gcp-sim`: the gcp target's whole run on the simulated Google Cloud trainctl starts for
the command (stacks/targets/gcp/sim/): the real preflight (quota, image, boot image, the Billing Catalog's
prices), the real synthesized training stack applied and destroyed in the sim, the real VM agent and a tiny
trainer on each simulated VM, the bucket in a Cloud Storage emulator.

The scenario: the overlay's, in europe-west4-b and europe-west4-c only (no fallback zones), europe-west4-c dry for
Spot, with on_demand_fallback: europe-west4-b preempts the VM once the classifier has trained an epoch (dry for Spot
after it), europe-west4-c is dry, so the dry pass takes on-demand VMs and the run finishes on demand in
europe-west4-b; its cost prices the Spot boot at Spot and the on-demand one at on-demand.

Cost: one tiny training plus three trainctl processes; 112 s and 128 s measured on the 2 shared cores at load 7 (the
scenario before on_demand_fallback: 251 s, 335 s and 502 s at load 7, 14 and 18; most of it the trainer's and the
tokenizer check's imports, as in the local market's tests).
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


SPOT_PER_HOUR, ON_DEMAND_PER_HOUR = 0.4512, 0.9094  # g2-standard-8 in europe-west4, the scenario's catalogue
SCENARIO = [
    "--set",
    "gcp.zones=[europe-west4-b, europe-west4-c]",
    "--set",
    "gcp.fallback_zones=[]",
    "--set",
    "gcp.simulated.overrides={zones: {europe-west4-c: {outages: [{start_s: 0}]}}}",
    "--set",
    "languages.fr.on_demand_fallback=true",
]


def test_a_preemption_and_a_dry_zone_move_the_run_then_on_demand_finishes_it_each_boot_priced_at_its_rate(gcp_sim):
    r = trainctl(gcp_sim, "train", "fr", *QUICK, *SCENARIO, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    # the real preflight, answered by the sim
    assert "quota ok: fr runs in europe-west4-b (PREEMPTIBLE_NVIDIA_L4_GPUS)" in out
    assert "boot image (fr, g2-standard-8) ok" in out and "estimated cost of 1 x g2-standard-8 (Spot" in out
    # the real stack, applied by the simulated apply in each zone it moved to
    applied = [line.split(" in ")[1].split(",")[0] for line in out.splitlines() if "simulated apply of" in line]
    assert applied == ["europe-west4-b", "europe-west4-c", "europe-west4-b"], out
    assert "was interrupted in zone europe-west4-b" in out and "moved to zone europe-west4-c" in out
    assert "on_demand_fallback takes on-demand VMs" in out and "moved to zone europe-west4-b" in out
    assert "training again in zone europe-west4-b" in out

    # the stack Terraform would be handed (cdktf deploy by hand) meets only the sim, gone with the command
    stack = json.loads((gcp_sim / f".trainstack/{ENV}/cdktf.out/stacks/train-fr/cdk.tf.json").read_text())
    [provider] = stack["provider"]["google"]
    assert provider["access_token"] == "simulated" and provider["compute_custom_endpoint"].startswith(
        "http://127.0.0.1:"
    )
    assert list(stack["terraform"]["backend"]) == ["local"]

    [row] = json.loads(trainctl(gcp_sim, "runs", "--json", "--env", ENV).stdout)
    assert row["state"] == "SUCCEEDED"
    assert row["placements"] == ["europe-west4-b", "europe-west4-c", "europe-west4-b"]
    assert row["ran_in"] == ["europe-west4-b", "europe-west4-b"] and row["preemptions"] == 1
    # two boots, the Spot one priced at Spot and the on-demand one at on-demand (whatever the last apply's
    # on_demand_fallback says of the run): the cost splits the billed time between the two rates
    assert row["vm_boots"] == 2
    hours = row["billed_vm_s"] / 3600
    on_demand_h = (row["est_cost"] - hours * SPOT_PER_HOUR) / (ON_DEMAND_PER_HOUR - SPOT_PER_HOUR)
    assert 5 / 3600 < on_demand_h < hours - 5 / 3600, (row, on_demand_h)  # each boot ran for more than 5 s

    # nothing left: the stack destroyed in the sim, the sim stopped with the command, no agent or trainer
    assert out.rstrip().endswith("simulated Google Cloud: stopped, its VMs with it"), out[-500:]
    assert "train-fr destroyed, nothing left running" in out
    assert _processes_of(gcp_sim) == []
    # every line the sim printed says so
    sim_lines = [line for line in r.stderr.splitlines() if "VM " in line and "agent" in line]
    assert sim_lines and all("simulated" in line for line in sim_lines)
