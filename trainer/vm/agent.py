"""The agent: run the trainer, forward SIGTERM, enforce max_run_hours, end the run, stop the group.

Exit codes (startup.sh acts on them): 143 = stopped by SIGTERM/SIGINT
(preemption or shutdown; the group is left alone so the MIG recreates the VM
and the run resumes); 124 = max_run_hours passed; otherwise the trainer's own
code once the run has a final status (0 = SUCCEEDED). A trainer code of 143
that the agent did not cause by forwarding a signal is reported as 1, so the
host never mistakes it for a preemption.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from trainer.runs import FAILED, SUCCEEDED, RunStatus, mark_failed, read_status, run_key
from trainer.storage import open_bucket
from trainer.supervisor import GRACE_S
from trainer.vm import log
from trainer.vm.group import stop_group
from trainer.vm.metadata import MetadataClient
from trainer.vm.spec import VmSpec, build_command, node_rank

EXIT_SIGNALLED, EXIT_DEADLINE = 143, 124


@dataclass(frozen=True)
class Outcome:
    """How the trainer ended: exit status (128+N for signal N) and why."""

    code: int
    signalled: bool = False
    timed_out: bool = False


def grace_s() -> float:
    """Seconds between SIGTERM and SIGKILL at the deadline (TRAINSTACK_GRACE_S for tests)."""
    return float(os.environ.get("TRAINSTACK_GRACE_S", GRACE_S))


def _status_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _terminate(child: subprocess.Popen, grace: float) -> int:
    child.send_signal(signal.SIGTERM)
    try:
        return child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        log(f"trainer still running {grace:g}s after SIGTERM: killing it")
        child.kill()
        return child.wait()


def supervise(cmd: list[str], deadline: float, grace: float) -> Outcome:
    """Runs `cmd` until it exits or the deadline passes; SIGTERM/SIGINT are forwarded to it."""
    state: dict = {"signalled": False, "child": None}

    def forward(signum, _frame):
        state["signalled"] = True
        log(f"got {signal.Signals(signum).name}: forwarding SIGTERM to the trainer (it saves a checkpoint)")
        child = state["child"]
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        log(f"starting: {shlex.join(cmd)}")
        child = state["child"] = subprocess.Popen(cmd)
        if state["signalled"]:  # the signal arrived while the child was being started
            child.send_signal(signal.SIGTERM)
        try:
            code = child.wait(timeout=max(deadline - time.time(), 0))
            timed_out = False
        except subprocess.TimeoutExpired:
            log("max_run_hours reached: stopping the trainer")
            code, timed_out = _terminate(child, grace), True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log(f"trainer exited with code {_status_code(code)}")
    return Outcome(_status_code(code), state["signalled"], timed_out)


def end_run(spec: VmSpec, rank: int, error: str) -> RunStatus:
    """Makes the run's status final (FAILED with `error` unless it already ended); node 0 stops the group."""
    status = mark_failed(open_bucket(spec.bucket), spec.lang, spec.run_id, spec.env, error)
    log(f"run {spec.run_id}: {status.state}" + (f" ({status.error})" if status.error else ""))
    if rank == 0:
        stop_group(spec.project, spec.zone, spec.mig)
    else:
        log(f"node {rank}: node 0 stops the group")
    return status


def _failure(outcome: Outcome, spec: VmSpec) -> str:
    if outcome.timed_out:
        return f"stopped after max_run_hours={spec.max_run_hours:g}"
    text = f"trainer exited with code {outcome.code} without writing a final status"
    if outcome.code > 128:
        text += f" (signal {outcome.code - 128})"
    return text


def exit_code(outcome: Outcome, status: RunStatus) -> int:
    """The agent's exit code once the run has a final status (see the module docstring)."""
    if outcome.timed_out and status.state == FAILED:
        return EXIT_DEADLINE
    if outcome.code == 0 and status.state != SUCCEEDED:
        return 1
    return 1 if outcome.code == EXIT_SIGNALLED else outcome.code


def record_instance(md: MetadataClient, spec: VmSpec, name: str, rank: int) -> None:
    """One record per boot under <run>/metadata/instances/: which VMs ran the run (and preemptions)."""
    now = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    record = {"name": name, "id": md.get("instance/id"), "zone": spec.zone, "rank": rank,
              "machine_type": (md.get("instance/machine-type") or "").rsplit("/", 1)[-1] or None,
              "image": md.attribute("trainstack-image"), "booted_at": now}
    try:
        open_bucket(spec.bucket).write_bytes(run_key(spec.lang, spec.run_id, f"metadata/instances/{name}/{now}.json"),
                                             json.dumps(record, indent=2).encode())
    except Exception as exc:  # a missing record must never stop a run
        log(f"could not record this instance in the run's metadata: {exc}")


def run_agent(md: MetadataClient, launcher: list[str] | None = None) -> int:
    """The whole VM-side run; `launcher` replaces `python -m trainer` / torchrun (test hook)."""
    spec = VmSpec.from_metadata(md)
    name = md.get("instance/name") or socket.gethostname()
    rank = node_rank(spec, name, md.attribute("trainstack-rank"))
    log(f"run {spec.run_id} ({spec.lang}, env {spec.env}) on {name}: node {rank} of {spec.nodes}, "
        f"{spec.gpus_per_node} GPU(s) per node, max_run_hours={spec.max_run_hours:g}")
    record_instance(md, spec, name, rank)
    status = read_status(open_bucket(spec.bucket), spec.lang, spec.run_id)
    if status is not None and status.terminal:
        # A VM recreated after the end (or a group that was not stopped): finish the job.
        log(f"run already ended ({status.state}): not starting the trainer")
        end_run(spec, rank, "unused: the run already ended")
        return 0
    deadline = spec.deadline()
    if time.time() >= deadline:
        log("max_run_hours already passed: not starting the trainer")
        outcome = Outcome(code=0, timed_out=True)
    else:
        outcome = supervise(build_command(spec, rank, launcher), deadline, grace_s())
    if outcome.signalled and not outcome.timed_out:
        log("stopped by a signal (preemption or shutdown): group left as is; the run resumes on the next VM")
        return EXIT_SIGNALLED
    if rank != 0 and outcome.code == 0 and not outcome.timed_out:
        # A worker may finish before node 0 has written SUCCEEDED: node 0 owns the final status.
        log(f"node {rank}: trainer done; node 0 writes the final status and stops the group")
        return 0
    return exit_code(outcome, end_run(spec, rank, _failure(outcome, spec)))


def fail_run(md: MetadataClient, reason: str) -> int:
    """Marks the run FAILED with `reason` (unless it ended) and stops the group, from any node."""
    try:
        bucket = open_bucket(md.require("trainstack-bucket"))
        lang, run_id, env = (md.require(f"trainstack-{k}") for k in ("lang", "run-id", "env"))
        status = mark_failed(bucket, lang, run_id, env, reason)
        log(f"run {run_id}: {status.state}" + (f" ({status.error})" if status.error else ""))
    finally:
        # Billing stops even if the status could not be written.
        stop_group(md.require("trainstack-project"), md.require("trainstack-zone"), md.require("trainstack-mig"))
    return 0
