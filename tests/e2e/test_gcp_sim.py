"""`trainctl train fr --env gcp-sim`: the gcp target's whole run on the simulated Google Cloud trainctl starts for
the command (stacks/targets/gcp/sim/): the real preflight (quota, image, boot image, the Billing Catalog's
prices), the real synthesized training stack applied and destroyed in the sim, the real VM agent and a tiny
trainer on each simulated VM, the bucket in a Cloud Storage emulator.

The scenario: the overlay's, in europe-west4-b and europe-west4-c only (no fallback zones), europe-west4-c dry for
Spot and its flex-start queue never serving, with capacity [spot, flex_start, on_demand]: europe-west4-b preempts the
VM once the classifier has trained an epoch (dry for Spot after it), the run leaves it at once for europe-west4-c,
which is dry, so the dry pass takes the flex-start rung, whose request in europe-west4-b is served after a simulated
minute: the run finishes there on a flex-start VM; its cost prices the Spot boot at Spot and the flex-start one at
the flex-start rate.

Cost, one core: the ladder test 35 CPU-s, 61 s wall (one tiny training, three trainctl processes); the two-node
test 114 CPU-s, ~210 s wall, ~70 s of it waiting on the simulated clock (3 boots of 2 VMs, each an agent, torchrun
and a trainer importing torch, fastai and spaCy, and 2 trainctl: not the training).
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.support.project import SAMPLE, TINY_SETS, make_project
from tests.support.trainctl import ctrl_c_once_printed, sim_vm_processes, trainctl, wait_for
from trainer.launchers.vm.spec import JOIN_TIMEOUT_S

ENV = "gcp-sim"
QUICK = ["--env", ENV, *TINY_SETS]


def _processes_of(root: Path) -> list[int]:
    return sim_vm_processes(root, ENV)


@pytest.fixture
def gcp_sim(tmp_path):
    root = make_project(tmp_path / "proj")
    r = trainctl(root, "data", "push", "fr", str(SAMPLE / "fr"), "--env", ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "simulated Google Cloud at http://127.0.0.1:" in r.stderr  # a bucket in the sim's Cloud Storage
    return root


SPOT_PER_HOUR, ON_DEMAND_PER_HOUR = 0.4512, 0.9094  # g2-standard-8 in europe-west4, the scenario's catalogue
FLEX_START_PER_HOUR = ON_DEMAND_PER_HOUR  # Google lists no flex-start discount for G2 (stacks/targets/gcp/pricing.py)
SCENARIO = [
    "--set",
    "gcp.zones=[europe-west4-b, europe-west4-c]",
    "--set",
    "gcp.fallback_zones=[]",
    "--set",
    "gcp.simulated.overrides={zones: {europe-west4-b: {flex_start_after_s: 60}, "
    "europe-west4-c: {outages: [{start_s: 0}], flex_start_after_s: null}}}",
    "--set",
    "languages.fr.capacity=[spot, flex_start, on_demand]",
]


def test_a_preemption_and_a_dry_zone_move_the_run_then_flex_start_finishes_it_each_boot_priced_at_its_rate(gcp_sim):
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
    assert "leaves zone europe-west4-b at once: it preempted this run" in out
    assert "capacity takes its next rung, flex-start VMs" in out and "moved to zone europe-west4-b" in out
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
    # two boots, the Spot one priced at Spot and the flex-start one at the flex-start rate (each placement's rung):
    # the cost splits the billed time between the two rates
    assert row["vm_boots"] == 2
    hours = row["billed_vm_s"] / 3600
    flex_h = (row["est_cost"] - hours * SPOT_PER_HOUR) / (FLEX_START_PER_HOUR - SPOT_PER_HOUR)
    assert 5 / 3600 < flex_h < hours - 5 / 3600, (row, flex_h)  # each boot ran for more than 5 s

    # nothing left: the stack destroyed in the sim, the sim stopped with the command, no agent or trainer
    assert out.rstrip().endswith("simulated Google Cloud: stopped, its VMs with it"), out[-500:]
    assert "train-fr destroyed, nothing left running" in out
    assert _processes_of(gcp_sim) == []
    # every line the sim printed says so
    sim_lines = [line for line in r.stderr.splitlines() if "VM " in line and "agent" in line]
    assert sim_lines and all("simulated" in line for line in sim_lines)


# Two nodes in europe-west4-a alone (every move is the run placed there again), a simulated minute per wall second:
# the agents' join limit (30 simulated min) is 30 wall s, twice what a new VM's agent may take to check it here.
SPEEDUP = 60
TWO_NODES = [
    *QUICK,
    *("--set", "defaults.nodes=2", "--set", f"gcp.simulated.speedup={SPEEDUP}"),
    *("--set", "gcp.zones=[europe-west4-a]", "--set", "gcp.fallback_zones=[]"),
    # preempted after its 1st and 2nd epochs (or an epoch or two later: the simulated cloud reads the log every
    # poll, and a tiny epoch is shorter under load), trained on to the 5th
    *("--set", "defaults.trainer.epochs_lm=5"),
]


def _preempted(epoch: int, outage_s: str) -> list[str]:
    """europe-west4-a with room, and one preemption there once the LM fine-tuning is past `epoch` (node 0 goes; the
    zone dry `outage_s` after it)."""
    return [
        "--set",
        "gcp.simulated.overrides={zones: {europe-west4-a: {outages: []}}, preemptions: "
        f"[{{zone: europe-west4-a, stage: lm_finetune, epoch: {epoch}, outage_s: {outage_s}}}]}}",
    ]


def _run_files(root: Path, run_id: str) -> Path:
    """The run's folder in the simulated Cloud Storage's files (read between commands, when no emulator runs)."""
    return root / f".trainstack/{ENV}/simulated-gcs/.cloudstorage/trainstack-gcp-sim/fr/runs/{run_id}"


def _boots(root: Path, run_id: str) -> list[float]:
    """When the run's VMs booted (the agents' records), epoch s, in order."""
    records = (_run_files(root, run_id) / "metadata/instances").glob("*/*.json")
    return sorted(datetime.strptime(p.stem, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp() for p in records)


def _at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_a_two_node_run_resumed_and_placed_again_long_after_its_interruptions_trains_on(gcp_sim):
    """Two nodes (gloo) meeting through node 0's rendezvous on the simulated VMs. Each new VM's agent ends a run
    whose nodes did not meet again within 30 (simulated) minutes of its interruption, counted from status.json's
    updated_at; a resume and a move must write it again:
    1. preempted in the LM fine-tuning, the zone dry for good; Ctrl-C while the run waits for a VM: it stays
       interrupted (not final), and `train --resume` places it past the join limit;
    2. resumed, the two nodes train an epoch; preempted again, the zone dry for 40 simulated minutes: the run is
       placed again after them, and its nodes train on (an epoch; then Ctrl-C, the rest is the other test's).
    Cost: in the module's docstring."""
    limit_s = JOIN_TIMEOUT_S / SPEEDUP
    code, out = ctrl_c_once_printed(
        gcp_sim,
        "was interrupted in zone europe-west4-a",
        *("train", "fr", *TWO_NODES, *_preempted(1, "null")),
        *("--set", "defaults.creation_error_minutes=0.25"),  # a 15 s wait for a VM to press Ctrl-C in
    )
    assert code == 130, out
    assert "data parallel: 2 processes" in out, out  # both nodes trained, one rank each
    following = re.search(r"stopped following run (\S+);", out)  # Ctrl-C while following (not moving)
    assert following, out
    run_id = following[1]
    # the simulated cloud this command started stopped with it, the run's VMs too: the hint is the resume's
    assert f"continue it: trainctl train fr --env {ENV} --resume {run_id}" in out and "keeps running" not in out, out
    interrupted = json.loads((_run_files(gcp_sim, run_id) / "status.json").read_text())
    assert (interrupted["state"], interrupted["stage"]) == ("RUNNING", "interrupted"), interrupted
    # the resume comes past the agents' join limit (its own preflight mostly takes longer on this machine)
    wait_for(lambda: time.time() > _at(interrupted["updated_at"]) + limit_s, limit_s + 5, "the join limit to pass")

    code, out = ctrl_c_once_printed(
        gcp_sim,
        "epoch 5/5",  # the LM fine-tuning trained on, on the VMs placed again
        *("train", "fr", *TWO_NODES, "--resume", run_id, *_preempted(2, f"{40 * 60}")),
    )
    assert code == 130, out  # stopped by the test, not ended by an agent
    assert f"resuming run {run_id} from its checkpoints" in out, out  # not final: the refresh of a live status
    assert "not starting the trainer" not in out and "did not meet again" not in out, out
    boots = _boots(gcp_sim, run_id)
    resumed_boot = next(t for t in boots if t > _at(interrupted["updated_at"]))
    assert resumed_boot - _at(interrupted["updated_at"]) > limit_s
    journal = json.loads((_run_files(gcp_sim, run_id) / "metadata/placements.json").read_text())
    preempted = journal["preemptions"][-1]
    # the stage `train` last saw before the interruption: its poll may miss a tiny LM fine-tuning resumed after base_lm
    assert preempted["stage"] in ("base_lm", "lm_finetune"), journal
    assert preempted["epoch"] >= 2 and preempted["training_again_at"] and preempted["cause"] == "preempted", journal
    placed_again = next(t for t in boots if t > _at(preempted["detected_at"]))
    assert placed_again - _at(preempted["detected_at"]) > limit_s, journal  # the zone's 40 min were past the limit
    assert len(journal["placements"]) >= 3, journal  # placed, resumed, placed again (once or more)
    assert _processes_of(gcp_sim) == []  # Ctrl-C stops the simulated cloud's VMs with the command
