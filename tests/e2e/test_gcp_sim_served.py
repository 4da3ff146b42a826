"""Several trainctl commands against one simulated Google Cloud, served for the env
(`python -m stacks.targets.gcp.sim serve --env gcp-sim`): what a per-command cloud cannot rehearse, a run that
outlives its command (re-attach after Ctrl-C) and `gc` beside a run.

Each test serves the env with its own scenario (`--set gcp.simulated.overrides=...`, the commands pass the same),
stops it at teardown and checks that nothing is left running. Costs are given per test, measured on the 2 shared
cores at load ~3, the serve's start and the `data push` included.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading

import pytest

from tests.support.project import SAMPLE, TINY_SETS, make_project
from tests.support.trainctl import ctrl_c_once_printed, sim_vm_processes, start_trainctl, trainctl, wait_for

ENV = "gcp-sim"
SERVED = f".trainstack/{ENV}/simulated-cloud.json"


@pytest.fixture
def serve(tmp_path):
    """serve(overrides) -> the project, its env's simulated cloud served with `overrides` and the sample pushed."""
    started = []

    def start(overrides: str):
        root = make_project(tmp_path / "proj")
        sets = ["--set", f"gcp.simulated.overrides={overrides}"]
        log = open(tmp_path / "serve.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "stacks.targets.gcp.sim", "serve", "--env", ENV, *sets],
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started.append((root, proc, log))
        wait_for(lambda: (root / SERVED).exists() or proc.poll() is not None, 60, "the served cloud's address")
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        r = trainctl(root, "data", "push", "fr", str(SAMPLE / "fr"), "--env", ENV, *sets)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"served by pid {proc.pid}" in r.stderr and "this command attaches" in r.stderr, r.stderr
        return root, sets

    yield start
    for root, proc, log in started:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=90)
        log.close()
        said = (tmp_path / "serve.log").read_text()
        assert proc.returncode == 0 and "simulated Google Cloud: stopped, its VMs with it" in said, said
        assert all("simulated" in line for line in said.splitlines()), said  # it never passes for Google
        assert not (root / SERVED).exists(), "the served cloud's address outlived it"
        assert sim_vm_processes(root, ENV) == [], said  # its VMs stopped with it


def _stop_vms(root, sig: int) -> None:
    for pid in sim_vm_processes(root, ENV):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _hold_vms_once_running(root) -> None:
    """SIGSTOP to the run's VM once its status.json in the served Cloud Storage says RUNNING (read every 0.5 s: a
    tiny run takes seconds from there to its classifier, where it is preempted)."""
    from urllib.parse import quote
    from urllib.request import urlopen

    served = json.loads((root / SERVED).read_text())
    objects = f"{served['storage_url']}/storage/v1/b/{served['bucket'].removeprefix('gs://')}/o"

    def running() -> bool:
        names = [o["name"] for o in json.load(urlopen(f"{objects}?prefix=fr/runs/")).get("items", [])]
        status = [
            json.load(urlopen(f"{objects}/{quote(n, safe='')}?alt=media")) for n in names if n.endswith("/status.json")
        ]
        return any(s.get("state") == "RUNNING" for s in status)

    wait_for(running, 240, "the run RUNNING")
    _stop_vms(root, signal.SIGSTOP)


def _ctrl_c_if_running(proc, reader, seen: list[str]) -> str:
    """Ctrl-C to the command unless it ended, then all it printed, on one line."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    reader.join(timeout=10)
    return " ".join("".join(seen).split())


def test_a_run_re_attached_with_the_quota_used_by_itself_is_followed_and_moved_from_its_own_zone(serve):
    """The project's Spot L4 quota is the run's one GPU (none in europe-west1), europe-west4-a offers no L4, so the
    run goes to europe-west4-b, not the first zone. Ctrl-C while following (the run's VM held still meanwhile, so it
    holds the quota when the next command looks), then `train` again: its quota preflight is refused by the run's own
    GPU, it attaches and follows the group in europe-west4-b; the VM, let go, is preempted there in the classifier
    stage: the re-attached command moves the run at once to europe-west4-c (then Ctrl-C: a moved run
    finishing is test_gcp_sim.py's). Cost: 46 s wall, 40 CPU-s measured (a tiny training up to its classifier, two
    trainctl, three syntheses)."""
    root, sets = serve(
        "{zones: {europe-west4-a: {accelerators: [nvidia-tesla-t4]}}, "
        "regions: {europe-west4: {quotas: {PREEMPTIBLE_NVIDIA_L4_GPUS: {limit: 1, usage: 0}}}, "
        "europe-west1: {quotas: {NVIDIA_L4_GPUS: 0}}}, "
        "preemptions: [{zone: europe-west4-b, stage: classifier, epoch: 1, outage_s: null}]}"
    )
    args = ["train", "fr", "--env", ENV, *TINY_SETS, *sets]
    try:
        # held still once it trains, before the classifier stage: the preemption waits for the re-attached command
        # (the follower prints the log every 5 s, after a tiny run's stages: a hold at a printed line lost the race)
        code, out = ctrl_c_once_printed(
            root, "waiting for the VM", *args, before_ctrl_c=lambda: _hold_vms_once_running(root)
        )
        assert code == 130, out
        following = re.search(r"stopped following run (\S+); it keeps running", out)  # served: it does
        assert following, out
        run_id = following[1]
        assert f"follow it again: trainctl train fr --env {ENV}" in out, out
        assert "quota ok: fr runs in europe-west4-b" in out, out

        proc = start_trainctl(root, *args)
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
        reader.start()
        wait_for(lambda: proc.poll() is not None or any("following it instead" in x for x in seen), 240, "attach")
    finally:
        _stop_vms(root, signal.SIGCONT)
    try:
        wait_for(lambda: proc.poll() is not None or any("moved to zone europe-west4-c" in x for x in seen), 240, "move")
    finally:
        out = _ctrl_c_if_running(proc, reader, seen)
    assert proc.returncode == 130, out
    # the quota preflight refused by the run's own GPU, then the run attached
    assert "a new run could not start (no zone fits train-fr" in out and "the stack holds a live one" in out, out
    assert f"a fr run is already active in env {ENV} ({run_id}," in out, out
    assert "was interrupted in zone europe-west4-b" in out, out
    assert "leaves zone europe-west4-b at once: it preempted this run" in out, out  # the zone is blocked for it
    assert f"run {run_id} moved to zone europe-west4-c" in out, out
    assert f"stopped following run {run_id}; it keeps running" in out, out


DRY = "{outages: [{start_s: 0}]}"


def test_gc_beside_a_run_waiting_for_capacity_keeps_its_stack_and_the_run_moves_on(serve):
    """Every zone dry: the run, never started (no status.json), moves from zone to zone for an hour of capacity
    wait. `trainctl gc` run beside it, while its stack is applied in europe-west4-b, finds the run's stack and keeps
    it (the run is starting); the run's next move, which comes while gc holds the stack's lock (gc is held still
    there), waits for it instead of failing the run as busy, and the run goes on moving. Cost: 48 s wall, 21 CPU-s
    measured (no trainer; three trainctl and a second serve refused)."""
    zones = ", ".join(f"{z}: {DRY}" for z in ("europe-west4-a", "europe-west4-b", "europe-west4-c", "europe-west1-b"))
    root, sets = serve(f"{{zones: {{{zones}}}}}")
    again = subprocess.run(
        [sys.executable, "-m", "stacks.targets.gcp.sim", "serve", "--env", ENV, *sets],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 2 and f"already served for env {ENV} by pid" in again.stdout, again.stdout + again.stderr
    proc = start_trainctl(root, "train", "fr", "--env", ENV, *sets, "--set", "defaults.capacity_wait_minutes=60")
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(
            lambda: proc.poll() is not None or any("moved to zone europe-west4-b" in x for x in seen), 240, "a move"
        )
        assert proc.poll() is None, "".join(seen)
        run_id = re.search(r"applying train-fr \(run (\S+)\)", "".join(seen))[1]

        # gc holds the stack's lock while it looks (its synthesis): held still there until the run's next move
        # meets it, so the move is sure to come while gc looks
        gc = start_trainctl(root, "gc", "--env", ENV, *sets)
        lock = root / f".trainstack/{ENV}/locks/train-fr.lock"
        wait_for(lambda: gc.poll() is not None or f'"pid": {gc.pid}' in lock.read_text(), 120, "gc to take the lock")
        os.killpg(gc.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: proc.poll() is not None or any("waiting for it" in x for x in seen), 120, "the move")
        finally:
            os.killpg(gc.pid, signal.SIGCONT)
        said = gc.communicate(timeout=120)[0]
        assert gc.returncode == 0, said
        assert f"train-fr: run {run_id} is STARTING; kept" in said and "gc: destroyed 0 stack(s)" in said, said
        assert proc.poll() is None, "".join(seen)  # the move waited for gc instead of failing the run

        applied = len(applied_zones("".join(seen)))
        wait_for(lambda: proc.poll() is not None or len(applied_zones("".join(seen))) > applied, 240, "the next move")
        assert proc.poll() is None, "".join(seen)  # still moving the run, not stopped by gc's look
    finally:
        out = _ctrl_c_if_running(proc, reader, seen)
    assert proc.returncode == 130, out
    assert f"train-fr in env {ENV} is busy: trainctl (pid {gc.pid}) is collecting train-fr; waiting for it" in out, out
    assert applied_zones(out)[:3] == ["europe-west4-a", "europe-west4-b", "europe-west4-c"], out
    assert f"run {run_id}" in out.rsplit("error:", 1)[-1], out  # what the Ctrl-C left of it (following or moving)


def applied_zones(out: str) -> list[str]:
    """The zones the simulated apply created the run's group in, in order."""
    return re.findall(r"simulated apply of train-fr: group \S+ in ([a-z0-9-]+),", out)
