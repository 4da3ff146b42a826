"""The gcp target's failover on the simulated Google Cloud, through `trainctl`, in scenarios where no VM ever
trains: each zone either lacks the GPU, lacks quota, or has no Spot capacity, so a run costs its preflight, one
synthesis and a few seconds per placement (the sim's minute is a wall second), never a trainer.

Each scenario is a `gcp.simulated.overrides` over the default scenario (stacks/targets/gcp/sim/scenario.yaml:
europe-west4-a/b/c, then the fallback europe-west1-b with one L4 of quota and europe-west1-c without the L4).
Costs are given per test, measured on the 2 shared cores at load 9-13, each plus a 2-4 s `data push`; a train's
cost, measured: its data check ~15 s, the rest of the preflight ~3 s, the synthesis ~30 s, ~10 s per placement.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.project import SAMPLE, make_project
from tests.support.trainctl import ctrl_c_once_printed, trainctl

ENV = "gcp-sim"
DRY = "{outages: [{start_s: 0}]}"


def overrides(doc: str) -> list[str]:
    return ["--set", f"gcp.simulated.overrides={doc}"]


def applied_zones(out: str) -> list[str]:
    """The zones the simulated apply created the run's group in, in order."""
    return re.findall(r"simulated apply of train-fr: group \S+ in ([a-z0-9-]+),", out)


@pytest.fixture
def pushed(tmp_path):
    root = make_project(tmp_path / "proj")
    r = trainctl(root, "data", "push", "fr", str(SAMPLE / "fr"), "--env", ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    return root


def _ctrl_c(root, args: list[str], line: str) -> tuple[int, str]:
    code, out = ctrl_c_once_printed(root, line, *args, timeout=240)
    return code, " ".join(out.split())


def train_one_spot_pass(pushed, scenario: list[str]):
    """`train fr` on Spot alone, one pass over the candidates (capacity_wait_minutes 0): where every one is dry,
    stopped resumable, exit 3."""
    sets = ["--set", "defaults.capacity_wait_minutes=0", "--set", "defaults.capacity=[spot]"]
    return trainctl(pushed, "train", "fr", "--env", ENV, *scenario, *sets)


def test_zones_without_the_gpu_or_quota_are_never_candidates_and_a_mixed_error_window_moves(pushed):
    """europe-west4-a offers no L4, europe-west1 grants no L4 quota; europe-west4-b answers
    ZONE_RESOURCE_POOL_EXHAUSTED and UNSUPPORTED_OPERATION in turn (the default scenario's mix), europe-west4-c
    is dry with ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS mixed in (the code
    https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability names beside
    ZONE_RESOURCE_POOL_EXHAUSTED: a capacity error, so the run stops for capacity, resumable, not for an
    unknown error). With capacity_wait_minutes=0 the run tries the two candidates once each and stops resumable.
    Cost: 83 s measured (quota ~4 s, train the rest)."""
    scenario = overrides(
        "{zones: {europe-west4-a: {accelerators: [nvidia-tesla-t4]}, "
        f"europe-west4-b: {DRY}, "
        "europe-west4-c: {outages: [{start_s: 0}], capacity_errors: [ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS]}}, "
        "regions: {europe-west1: {quotas: {NVIDIA_L4_GPUS: 0}}}}"
    )
    q = trainctl(pushed, "quota", "--env", ENV, *scenario, "--lang", "fr", timeout=120)
    assert q.returncode == 0, q.stdout + q.stderr
    text = " ".join(q.stdout.split())
    assert "nvidia-l4 not offered in europe-west4-a" in text, text
    assert "train-fr → europe-west4-b (PREEMPTIBLE_NVIDIA_L4_GPUS)" in text, text

    r = train_one_spot_pass(pushed, scenario)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    # every candidate tried once (a wait of 0 still makes one pass), none without the L4 or its quota
    assert applied_zones(out) == ["europe-west4-b", "europe-west4-c"], out
    # both codes in europe-west4-b's window, and the run moved on rather than stopping at the unknown one
    assert "europe-west4-b (gcp-sim-train-fr-" in out and "UNSUPPORTED_OPERATION" in out, out
    assert "moved to zone europe-west4-c" in out, out
    assert "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS" in out, out
    # the group's retries fail alike: each error told once, then its count, never the same line twice
    told = [line for line in out.splitlines() if "VM creation failed in" in line]
    assert told and len(told) == len(set(told)), out
    run_id = re.search(r"--resume (\S+)", r.stderr)[1]
    assert "no capacity for run" in r.stderr and f"trainctl train fr --env {ENV} --resume {run_id}" in r.stderr


def test_a_regional_quota_refusal_skips_the_rest_of_its_region(pushed):
    """INSTANCES is full in europe-west4 (a quota the preflight does not read: only the VM's creation meets it,
    "Quota 'INSTANCES' exceeded.  Limit: 2.0 in region europe-west4."). The run leaves the region after its
    first zone and tries europe-west1-b (dry) next. Cost: 66 s measured."""
    scenario = overrides(
        "{regions: {europe-west4: {quotas: {INSTANCES: {limit: 2, usage: 2}}}}, "
        f"zones: {{europe-west4-a: {{outages: []}}, europe-west1-b: {DRY}}}}}"
    )
    r = train_one_spot_pass(pushed, scenario)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    assert "QUOTA_EXCEEDED: Quota 'INSTANCES' exceeded." in out, out
    assert applied_zones(out) == ["europe-west4-a", "europe-west1-b"], out  # b and c of europe-west4 skipped


def test_a_global_quota_refusal_stops_the_run_naming_the_quota(pushed):
    """CPUS_ALL_REGIONS is used up by other VMs (the preflight reads GPUS_ALL_REGIONS, not this one): no region
    escapes a global quota, so the run stops after its first zone and names it. That first zone is the one the
    capacity advice scores best (europe-west4-c), not the env's first. Cost: 61 s measured."""
    scenario = overrides(
        "{global_quotas: {CPUS_ALL_REGIONS: {limit: 128, usage: 128}}, "
        "zones: {europe-west4-a: {}, europe-west4-c: {obtainability: 0.9}}}"
    )
    r = trainctl(pushed, "train", "fr", "--env", ENV, *scenario)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "zones of fr ranked by data: europe-west4-c, europe-west4-a, europe-west4-b, europe-west1-b" in out, out
    assert applied_zones(out) == ["europe-west4-c"], out
    error = next(line for line in r.stderr.splitlines() if line.startswith("error:"))
    assert "CPUS_ALL_REGIONS" in error, out
    assert "Quota 'CPUS_ALL_REGIONS' exceeded.  Limit: 128.0 globally." in out, out  # Compute Engine's words


def test_quota_as_google_counts_it_for_spot_and_flex_start_vms(pushed):
    """The preflight on two quota rules (`trainctl quota`, no run; ~3 s each):
    - GPUS_ALL_REGIONS used up by other VMs: no region helps, the error names the global quota
      (https://cloud.google.com/compute/resource-usage, "GPU quota").
    - A region that grants preemptible L4 quota: its Spot VMs draw on it alone, so when it is used up the region's
      zones are out though its standard NVIDIA_L4_GPUS has room; europe-west1, which grants none, takes the run
      on its standard quota (https://cloud.google.com/compute/docs/instances/create-use-spot, "Before you
      begin"; https://cloud.google.com/compute/resource-usage, "Preemptible quota"). The same for a run at rung
      flex_start. Cost: 7 s measured (+3 s for flex_start)."""
    full_global = overrides("{global_quotas: {GPUS_ALL_REGIONS: {limit: 8, usage: 8}}}")
    r = trainctl(pushed, "quota", "--env", ENV, "--lang", "fr", *full_global, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "the global GPU quota GPUS_ALL_REGIONS is the blocker for train-fr" in r.stderr, r.stderr
    assert "--quota-id=GPUS-ALL-REGIONS-per-project" in r.stderr

    spot_full = overrides("{regions: {europe-west4: {quotas: {PREEMPTIBLE_NVIDIA_L4_GPUS: {limit: 8, usage: 8}}}}}")
    r = trainctl(pushed, "quota", "--env", ENV, "--lang", "fr", *spot_full, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {line.split("\t")[0]: line for line in r.stdout.splitlines() if "\t" in line}
    assert all("NO: 0 free" in rows[f"europe-west4-{z}"] for z in "abc"), r.stdout
    assert "train-fr → europe-west1-b (NVIDIA_L4_GPUS)" in r.stdout, r.stdout
    # flex-start VMs draw on the same preemptible quota: the run at rung flex_start goes where Spot would
    # (https://cloud.google.com/compute/docs/instances/about-flex-start-vms)
    flex = ["--set", "languages.fr.capacity=[flex_start, on_demand]"]
    r = trainctl(pushed, "quota", "--env", ENV, "--lang", "fr", *spot_full, *flex, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "train-fr → europe-west1-b (NVIDIA_L4_GPUS)" in r.stdout, r.stdout
    assert "flex-start VMs use on-demand quota" in r.stdout, r.stdout


def test_on_demand_fallback_on_a_spot_only_machine_is_refused_before_the_cloud_is_asked(pushed):
    """a3-highgpu-1g is Spot or Flex-start only: a dry Spot pass would ask for on-demand VMs the group can never
    create. Refused at config check (exit 2) by `trainctl quota`. Cost: 1 s (and the 2.5 s data push)."""
    r = trainctl(
        pushed,
        "quota",
        "--env",
        ENV,
        "--lang",
        "fr",
        "--set",
        "languages.fr.gcp.machine_type=a3-highgpu-1g",
        "--set",
        "languages.fr.gcp.gpu.type=nvidia-h100-80gb",
        "--set",
        "languages.fr.gcp.gpu.count=1",
        "--set",
        "languages.fr.on_demand_fallback=true",
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert (
        "capacity rung on_demand cannot serve this machine: a3-highgpu-1g is offered as Spot or Flex-start only"
        in r.stderr
    )


def test_ctrl_c_in_the_pause_between_dry_passes_prints_the_resume_command(pushed):
    """Every candidate dry, a capacity wait of an hour: Ctrl-C while the run pauses before its next pass stops it
    FAILED and resumable, with its --resume command, not 'tear it down'. Cost: 99 s measured."""
    scenario = overrides(
        f"{{zones: {{europe-west4-a: {DRY}, europe-west4-b: {DRY}, europe-west4-c: {DRY}, europe-west1-b: {DRY}}}}}"
    )
    args = [
        "train",
        "fr",
        "--env",
        ENV,
        *scenario,
        "--set",
        "defaults.capacity_wait_minutes=60",
        "--set",
        "defaults.capacity=[spot]",
    ]
    code, out = _ctrl_c(pushed, args, "trying them again in")
    assert code == 130, out
    resume = re.search(r"--resume (\S+)", out)
    assert resume, out  # not 'tear it down' though the stack is gone
    run_id = resume[1]
    assert f"trainctl train fr --env {ENV} --resume {run_id}" in out and "tear it down" not in out, out
    rows = json.loads(trainctl(pushed, "runs", "--json", "--env", ENV).stdout)
    assert [row["state"] for row in rows] == ["FAILED"], rows


def test_ctrl_c_in_a_moves_destroy_and_in_its_apply_leaves_the_run_resumable_with_its_command(pushed):
    """Ctrl-C while a move destroys the stack in the dry zone (a group deletion that takes 10 simulated minutes,
    `operation_s`), then, resumed, while it applies the stack in the next zone (a group creation as slow): each
    time the run is FAILED with its --resume command in the output and in `trainctl status`, never 'tear it
    down' nor PENDING with no word. Cost: 69 to 137 s measured (two commands, a synthesis or two each)."""
    zones = f"zones: {{europe-west4-a: {DRY}, europe-west4-b: {DRY}, europe-west4-c: {DRY}, europe-west1-b: {DRY}}}"
    slow_delete = overrides(f"{{{zones}, operation_s: {{instanceGroupManagers.delete: 600}}}}")
    code, out = _ctrl_c(pushed, ["train", "fr", "--env", ENV, *slow_delete], "destroying train-fr")
    assert code == 130, out
    assert "moving it" in out and "destroying train-fr" in out, out
    resume = re.search(r"--resume (\S+)", out)
    assert resume, out
    run_id = resume[1]
    assert f"continue it: trainctl train fr --env {ENV} --resume {run_id}" in out and "tear it down" not in out, out
    status = trainctl(pushed, "status", "fr", "--run", run_id, "--env", ENV)
    said = " ".join(status.stdout.split())
    assert "FAILED" in said and f"--resume {run_id}" in said, status.stdout + status.stderr

    slow_insert = overrides(f"{{{zones}, operation_s: {{instanceGroupManagers.insert: 600}}}}")
    args = ["train", "fr", "--env", ENV, "--resume", run_id, *slow_insert]
    code, out = _ctrl_c(pushed, args, f"applying train-fr (run {run_id}) at zone europe-west4-b")
    assert code == 130, out
    assert f"continue it: trainctl train fr --env {ENV} --resume {run_id}" in out and "tear it down" not in out, out
    [row] = json.loads(trainctl(pushed, "runs", "--json", "--env", ENV).stdout)
    assert row["state"] == "FAILED" and f"--resume {run_id}" in row["error"], row


def test_a_new_run_refused_by_a_quota_its_own_run_would_use_asks_the_bucket_and_synthesizes_nothing(pushed):
    """The project's Spot L4 quota exactly used (as by a run of the language already on its VM) and none left in
    the fallback region: `train` refused by the preflight looks for a live run to re-attach to in the bucket
    first (none here), so it stops naming the quota with nothing synthesized. Re-attaching itself needs a cloud
    that outlives the first command: test_gcp_sim_served.py. Cost: 4-7 s measured."""
    scenario = overrides(
        "{regions: {europe-west4: {quotas: {PREEMPTIBLE_NVIDIA_L4_GPUS: {limit: 1, usage: 1}}}, "
        "europe-west1: {quotas: {NVIDIA_L4_GPUS: 0}}}}"
    )
    r = trainctl(pushed, "train", "fr", "--env", ENV, *scenario)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    assert "PREEMPTIBLE_NVIDIA_L4_GPUS" in r.stderr, out
    assert not (pushed / f".trainstack/{ENV}/cdktf.out").exists(), out  # asked the bucket, not a synthesis


def test_ctrl_c_in_a_first_apply_on_a_per_command_sim_leaves_nothing_to_tear_down(pushed):
    """The simulated cloud goes with the command, its stack's state too: a Ctrl-C while the first group is created
    (10 simulated minutes) says to start it again (no trainer ran), never 'tear it down'. Cost: one synthesis, ~15 s."""
    slow_insert = overrides("{operation_s: {instanceGroupManagers.insert: 600}}")
    code, out = _ctrl_c(pushed, ["train", "fr", "--env", ENV, *slow_insert], "applying train-fr (run")
    assert code == 130, out
    assert "nothing of it outlives this command" in out and "tear it down" not in out, out
    assert f"start it again: trainctl train fr --env {ENV}" in out, out
