"""Each simulated VM runs the real VM agent as a local process (a fake trainer in place of fastai,
tests/fixtures/vm/fake_trainer.py): the agent ends the run and resizes its own group to 0 through the sim;
a preemption reaches it as SIGTERM and the recreated VM resumes the run. Each test: a few seconds (two or
three agent processes start)."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone

import pytest
import requests

from stacks.targets.gcp.sim.cloud import SimCloud
from stacks.targets.gcp.sim.scenario import load_scenario
from stacks.targets.gcp.sim.server import SimServer
from stacks.targets.gcp.sim.vms import VmRunner
from tests.support.recorded_api import FIXTURES
from trainer.launchers.vm.spec import VmSpec
from trainer.runfiles.status_file import SUCCEEDED, read_status
from trainer.storage import open_bucket

FAKE = FIXTURES / "vm" / "fake_trainer.py"
ZONE, GROUP = "europe-west4-c", "dev-train-fr"
P = "/compute/v1/projects/p1"
FAST = {"TRAINSTACK_GRACE_S": "1", "TRAINSTACK_SETTLE_S": "0.5", "TRAINSTACK_REJOIN_PAUSE_S": "0"}


def wait_for(what, predicate, timeout: float = 60):
    """Polls an event (never a fixed sleep)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def world(tmp_path):
    """world(mode, **scenario overrides) -> (sim, runner, bucket, run id, marks file): a group of one Spot VM in
    europe-west4-c whose template carries a run's metadata (file:// bucket, the fake trainer in `mode`)."""
    opened = []

    def start(mode: str, **overrides):
        sim = SimServer(SimCloud(load_scenario(overrides={"speedup": 1e-6, **overrides}))).__enter__()
        runner = VmRunner(
            sim.cloud,
            sim.url,
            sim.metadata_host,
            tmp_path / "vms",
            trainer_cmd=f"{sys.executable} {FAKE}",
            env=FAST,
            say=lambda line: None,
        ).__enter__()
        opened.extend([runner, sim])
        bucket_uri = f"file://{tmp_path / 'bucket'}"
        run_id = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + "ab12"
        marks = tmp_path / "marks.jsonl"
        args = ["--lang", "fr", "--bucket", bucket_uri, "--env", "dev", "--mode", mode, "--mark", str(marks)]
        spec = VmSpec(run_id, "fr", "dev", bucket_uri, args, 1, 1, 4, "p1", ZONE, GROUP, GROUP)
        template = {
            "name": "tpl",
            "properties": {
                "machineType": "g2-standard-8",
                "guestAccelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": 1}],
                "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"},
                "metadata": {"items": [{"key": k, "value": v} for k, v in spec.to_metadata().items()]},
            },
        }
        assert requests.post(f"{sim.url}{P}/global/instanceTemplates", json=template, timeout=10).ok
        group = {"name": GROUP, "baseInstanceName": GROUP, "instanceTemplate": "tpl", "targetSize": 1}
        assert requests.post(f"{sim.url}{P}/zones/{ZONE}/instanceGroupManagers", json=group, timeout=10).ok
        return sim, runner, open_bucket(bucket_uri), run_id, marks

    yield start
    for item in opened:
        item.__exit__(None, None, None)


def marks(path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_vm_agent_ends_the_run_and_resizes_its_own_group_to_zero_through_the_sim(world):
    sim, runner, bucket, run_id, _ = world("succeed")
    sim.cloud.skip(30)  # booted: the agent starts
    group = sim.cloud.groups[(f"zones/{ZONE}", GROUP)]
    wait_for("the agent's resize to 0", lambda: group.target_size == 0)  # through the sim's API
    assert read_status(bucket, "fr", run_id).state == SUCCEEDED
    # Deleting the group's VMs deletes the agent's own VM: the shutdown's SIGTERM may come before it exits
    # (it does not wait for the operation, trainer/launchers/vm/group.py).
    wait_for("the agent to end", lambda: runner.exits)
    assert runner.exits[0][1] in (0, -15)
    sim.cloud.skip(30)
    assert group.instances == {} and list(runner.boots.values()) == [1]


def test_a_preemption_reaches_the_agent_as_sigterm_and_the_recreated_vm_resumes_the_run(world):
    sim, runner, bucket, run_id, marks_file = world("sleep", preemptions=[{"zone": ZONE, "at_s": 60, "outage_s": 120}])
    sim.cloud.skip(30)
    wait_for("the trainer to start", lambda: len(marks(marks_file)) == 1)
    sim.cloud.skip(30)  # the preemption at 60 s: SIGTERM, the trainer checkpoints and exits 143
    wait_for("the agent to stop", lambda: runner.exits)
    assert runner.exits[0][1] == 143 and "SIGTERM" in marks(marks_file)
    assert read_status(bucket, "fr", run_id).stage == "interrupted"
    sim.cloud.skip(60)  # deleted (instanceTerminationAction DELETE); the zone is dry until 180 s
    assert [(vm.status, vm.action) for vm in sim.cloud.groups[(f"zones/{ZONE}", GROUP)].instances.values()] == [
        ("", "RECREATING")
    ]
    sim.cloud.skip(120)  # capacity back: recreated under the same name, booted, the agent starts again
    wait_for("the trainer to resume", lambda: len([m for m in marks(marks_file) if m != "SIGTERM"]) == 2)
    assert read_status(bucket, "fr", run_id).resumed == 1
    assert list(runner.boots.values()) == [2]


def test_a_preemption_whose_shutdown_script_never_runs_reaches_the_trainer_through_the_agents_notice_watch(world):
    """instance/preempted turns TRUE and nothing else comes (no shutdown script, as a real preemption was seen to
    do): the agent's long poll SIGTERMs the trainer, which checkpoints and exits 143 before the VM is killed."""
    preemption = {"zone": ZONE, "at_s": 60, "outage_s": 120}
    sim, runner, bucket, run_id, marks_file = world("sleep", preemptions=[preemption], shutdown_script=False)
    sim.cloud.skip(30)
    wait_for("the trainer to start", lambda: len(marks(marks_file)) == 1)
    sim.cloud.skip(30)  # the preemption at 60 s: the metadata flips, no SIGTERM from the host
    wait_for("the agent to stop", lambda: runner.exits, timeout=20)
    assert runner.exits[0][1] == 143 and marks(marks_file).count("SIGTERM") == 1
    assert read_status(bucket, "fr", run_id).stage == "interrupted"
    [agent_log] = list((runner.workdir / next(iter(runner.boots))).glob("boot-1/agent.log"))
    assert "preemption notice (instance/preempted is TRUE)" in agent_log.read_text()
    assert not (agent_log.parent / "shutting-down").exists()  # the shutdown script never ran


def test_a_preemption_at_a_stage_fires_once_the_vms_trainer_starts_it_in_the_run_log(world):
    """The local market's stage trigger, read from the run log in the bucket the VM's metadata names."""
    stage = {"zone": ZONE, "stage": "classifier", "epoch": 0, "outage_s": 0}
    sim, runner, bucket, run_id, marks_file = world("sleep", preemptions=[stage])
    sim.cloud.skip(30)
    wait_for("the preemption", lambda: runner.exits)  # the clock stands still: only the log can fire it
    assert runner.exits[0][1] == 143 and "SIGTERM" in marks(marks_file)
    assert list(sim.cloud.fired) == [f"{ZONE}@classifier:0"]
    assert read_status(bucket, "fr", run_id).stage == "interrupted"


def test_a_deleted_vm_takes_every_process_under_its_agent_those_in_sessions_of_their_own_too(tmp_path):
    """torchrun starts its workers in sessions of their own: killing the agent's process group alone left them
    training after the command ended. Cost: two short-lived processes."""
    import os
    import subprocess

    from stacks.targets.gcp.sim.vms import _kill_vm

    pid_file = tmp_path / "worker.pid"
    spawn = (
        "import subprocess, sys, time\n"
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(w.pid))\n"
        "time.sleep(600)\n"
    )
    agent = subprocess.Popen([sys.executable, "-c", spawn], start_new_session=True)
    wait_for("the worker", lambda: pid_file.exists() and pid_file.read_text())
    worker = int(pid_file.read_text())
    _kill_vm(agent)
    agent.wait(timeout=10)

    def gone() -> bool:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return True
        state = open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[0]
        return state == "Z"  # killed, waiting for init to reap it

    wait_for("the worker to be killed", gone, timeout=10)


def test_the_clouds_own_read_of_a_run_log_that_storage_refuses_gives_up_quietly_and_says_it_is_simulated(
    gcs_env, gcs_proxy, tmp_path, monkeypatch
):
    """A preemption trigger's poll of the run log meets a Cloud Storage that keeps failing: it gives up within its
    short deadline (the next poll asks again), every retry is said as the simulated cloud's own (a served cloud's
    output is all "simulated"), and none reaches the process's retry listeners (a command's own run log)."""
    from types import SimpleNamespace

    from trainer.storage import GcsBucket, StoragePolicy, on_retry

    monkeypatch.setenv("TRAINSTACK_STORAGE_DEADLINE_S", "1")
    monkeypatch.setenv("TRAINSTACK_STORAGE_BACKOFF_S", "0.05")
    prefix, run_id = f"sim-{tmp_path.name}", "20261129-120000-ab12"
    log_key = f"fr/runs/{run_id}/log.txt"
    GcsBucket("test-bucket", prefix, policy=StoragePolicy(deadline_s=20)).append(log_key, b"stage lm started\n")
    said, heard = [], []
    remove = on_retry(heard.append)
    runner = VmRunner(SimCloud(load_scenario(overrides={"speedup": 1e-6})), "", str, tmp_path, say=said.append)
    vm = SimpleNamespace(
        name="gcp-sim-train-fr-0001",
        shape=SimpleNamespace(
            metadata={
                "trainstack-bucket": f"gs://test-bucket/{prefix}",
                "trainstack-lang": "fr",
                "trainstack-run-id": run_id,
            }
        ),
    )
    try:
        gcs_proxy.add("status", r"^GET /storage/v1/b/test-bucket/o\?", times=10_000, status=503)
        assert runner.log_of(vm) == []
        assert said and all(line.startswith("simulated cloud reading a run log: ") and "503" in line for line in said)
        assert heard == []
        gcs_proxy.clear()
        assert runner.log_of(vm) == ["stage lm started"]  # the next poll reads what it missed
    finally:
        remove()
