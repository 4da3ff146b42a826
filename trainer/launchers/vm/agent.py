"""The agent: run the trainer, forward SIGTERM and the preemption notice, enforce max_run_hours, end the run, stop
the group.

The preemption notice: while the trainer runs, a thread long-polls the metadata key instance/preempted; when it
turns TRUE the trainer gets SIGTERM at once (it saves at the end of its batch), as the shutdown script's SIGTERM
does; whichever comes second changes nothing.

Exit codes (startup.sh acts on them): 143 = stopped by SIGTERM/SIGINT
(preemption or shutdown; the group is left alone so the MIG recreates the VM
and the run resumes); 124 = max_run_hours passed; otherwise the trainer's own
code once the run has a final status (0 = SUCCEEDED). A trainer code of 143
that the agent did not cause by forwarding a signal is reported as 1, so the
host never mistakes it for a preemption.

Nothing is a failure while the VM is going away: before recording one, the agent
asks the metadata server whether Compute Engine preempted the VM and looks for
the flag shutdown.sh drops (mounted from the host); either way the run stays
resumable and the agent exits 143, like a forwarded SIGTERM.

Several VMs: when another node is preempted the trainer here stops too (status
stage "interrupted") and torchrun restarts it in the same rendezvous; when
torchrun gives up instead (node 0, the rendezvous host, was the one preempted),
the agent starts it again to rejoin, until the run has been interrupted more
than max_restarts times or the nodes have not met again within the join timeout
(the rule: trainer.launchers.interruptions).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, replace
from datetime import datetime

from trainer.errors import TrainerExit
from trainer.launchers.interruptions import checkpointed, interruption, restarts_exhausted
from trainer.launchers.trainer_process import GRACE_S
from trainer.launchers.vm import log
from trainer.launchers.vm.group import stop_group
from trainer.launchers.vm.hardware import probe, problem
from trainer.launchers.vm.kept import rescue
from trainer.launchers.vm.metadata import MetadataClient
from trainer.launchers.vm.restarts import ErrorRestarts, restarts_so_far
from trainer.launchers.vm.signals import Forwarder, NoticeWatch, going_away
from trainer.launchers.vm.spec import JOIN_TIMEOUT_S, VmSpec, build_command, command_env, node_rank
from trainer.runfiles.durations import duration
from trainer.runfiles.keys import run_key
from trainer.runfiles.status_file import FAILED, SUCCEEDED, RunStatus, mark_failed, read_status
from trainer.storage import open_bucket

EXIT_SIGNALLED, EXIT_DEADLINE = TrainerExit.INTERRUPTED, TrainerExit.DEADLINE
# Rank 0 may live on another node and still be saving when torchrun here gives up.
SETTLE_S = 40
REJOIN_PAUSE_S = 10  # between two torchrun starts while node 0 is being recreated
# shutdown.sh's flag, as startup.sh mounts the host's /run/trainstack into the container.


@dataclass(frozen=True)
class Outcome:
    """How the trainer ended: exit status (128+N for signal N), why, and the error to record if any."""

    code: int
    signalled: bool = False
    timed_out: bool = False
    error: str | None = None


def _env_s(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def grace_s() -> float:
    """Seconds between SIGTERM and SIGKILL at the deadline (TRAINSTACK_GRACE_S for tests)."""
    return _env_s("TRAINSTACK_GRACE_S", GRACE_S)


def join_timeout_s() -> float:
    """How long an interrupted multi-node run may wait for its nodes to meet again (TRAINSTACK_JOIN_TIMEOUT_S: the
    simulated cloud gives it in its own time, JOIN_TIMEOUT_S / speedup, as it recreates VMs that much faster)."""
    return _env_s("TRAINSTACK_JOIN_TIMEOUT_S", JOIN_TIMEOUT_S)


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


def supervise(cmd: list[str], deadline: float, grace: float, fwd: Forwarder, env: dict | None = None) -> Outcome:
    """Runs `cmd` until it exits or the deadline passes; `fwd` passes SIGTERM/SIGINT on to it."""
    log(f"starting: {shlex.join(cmd)}")
    child = fwd.child = subprocess.Popen(cmd, env={**os.environ, **env} if env else None)
    if fwd.signalled:  # the signal arrived while the child was being started
        fwd.stop_child()
    try:
        code = child.wait(timeout=max(deadline - time.time(), 0))
        timed_out = False
    except subprocess.TimeoutExpired:
        log("max_run_hours reached: stopping the trainer")
        code, timed_out = _terminate(child, grace), True
    finally:
        fwd.child = None
    log(f"trainer exited with code {_status_code(code)}")
    return Outcome(_status_code(code), fwd.signalled, timed_out)


def _epoch(iso: str | None) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


def end_reason(spec: VmSpec, status: RunStatus, now: float) -> str | None:
    """Why an interrupted multi-node run must end rather than rejoin the rendezvous (None: rejoin).

    The count is the run's (trainer.launchers.interruptions.interruption), whichever node was preempted and whoever
    counts.
    """
    return interruptions_exhausted(spec, status) or not_met_again(spec, status, now)


def interruptions_exhausted(spec: VmSpec, status: RunStatus) -> str | None:
    taken = len(restarts_so_far(spec))
    return restarts_exhausted(interruption(status, restarted_on_errors=taken), spec.max_restarts)


def not_met_again(spec: VmSpec, status: RunStatus, now: float) -> str | None:
    """The nodes have not met again within the join timeout of the interruption (or of the last restart after
    such a failure: trainer.launchers.restarts)."""
    records = restarts_so_far(spec)
    times = [t for t in (_epoch(status.updated_at), *(_epoch(r.get("at")) for r in records[-1:])) if t is not None]
    since, limit = (max(times) if times else None), join_timeout_s()
    if since is not None and now - since > limit:
        return (
            f"the {spec.nodes} nodes did not meet again within {duration(limit) if limit >= 1 else f'{limit:g}s'} of "
            f"interruption {interruption(status, restarted_on_errors=len(records))} (a preempted VM not recreated: "
            "Spot capacity?)"
        )
    return None


def _describe(status: RunStatus | None) -> str:
    if status is None:
        return "no status.json"
    return f"status.json: {status.state}, stage {status.stage!r}, resumed {status.resumed} time(s)"


def read_settled(spec: VmSpec, fwd: Forwarder) -> RunStatus | None:
    """The status once rank 0 (maybe on another node) has had time to write its last word."""
    bucket = open_bucket(spec.bucket)
    status = read_status(bucket, spec.lang, spec.run_id)
    if spec.nodes > 1:
        until = time.monotonic() + _env_s("TRAINSTACK_SETTLE_S", SETTLE_S)
        while not (status is None or status.terminal or checkpointed(status)) and time.monotonic() < until:
            if fwd.sleep(1):
                break
            status = read_status(bucket, spec.lang, spec.run_id)
    log(_describe(status))
    return status


def run_trainer(spec: VmSpec, rank: int, launcher: list[str] | None, fwd: Forwarder) -> Outcome:
    """Runs this node's trainer; on several VMs, starts it again to rejoin after an interruption elsewhere."""
    cmd, env, deadline = build_command(spec, rank, launcher), command_env(spec), spec.deadline()
    errors = ErrorRestarts(spec, rank, lambda: going_away(MetadataClient()))
    while True:
        if time.time() >= deadline:
            log("max_run_hours already passed: not starting the trainer")
            return Outcome(code=0, timed_out=True)
        if spec.nodes > 1:
            errors.after = len(restarts_so_far(spec))  # a failure of this start is named by the restarts before it
        outcome = supervise(cmd, deadline, grace_s(), fwd, env)
        if outcome.signalled or outcome.timed_out or outcome.code == 0:
            return outcome
        status = read_settled(spec, fwd)
        if fwd.signalled:
            return replace(outcome, signalled=True)
        if not checkpointed(status):
            if (more := errors.restart(outcome.code, spec.restart_policy.cause(outcome.code, status))) is True:
                continue
            return replace(outcome, error=_failure(outcome, spec, status) + more)
        if spec.nodes == 1:
            lost = f"a trainer process lost its peer (NCCL or gloo; exit {outcome.code}) with no preemption of this VM"
            if (more := errors.restart(outcome.code, lost, infrastructure=True)) is True:
                continue
            return replace(
                outcome,
                error=(
                    f"the trainer stopped as interrupted (exit {outcome.code}) but no SIGTERM reached this VM's "
                    f"agent: not a preemption, so nothing would resume it (see log.txt){more}"
                ),
            )
        error = rejoin_or_end(errors, status, outcome.code)
        if error:
            return replace(outcome, error=error)
        # torchrun gives up without restarting when the rendezvous store (node 0's torchrun)
        # went away: start it again to meet the recreated node 0.
        log(
            f"the run was interrupted elsewhere and torchrun gave up (exit {outcome.code}): "
            f"rejoining the rendezvous on {spec.rendezvous}"
        )
        if fwd.sleep(_env_s("TRAINSTACK_REJOIN_PAUSE_S", REJOIN_PAUSE_S)):
            return Outcome(EXIT_SIGNALLED, signalled=True)


def rejoin_or_end(errors: ErrorRestarts, status: RunStatus, code: int | None = None) -> str | None:
    """Why an interrupted multi-node run ends here (None: rejoin). Nodes that did not meet again within the join
    timeout are an infrastructure failure: restarted (a new join window) within max_restarts_on_errors."""
    if exhausted := interruptions_exhausted(errors.spec, status):
        return exhausted
    if (late := not_met_again(errors.spec, status, time.time())) is None:
        return None
    more = errors.restart(code, late, infrastructure=True)
    return None if more is True else late + more


def end_run(spec: VmSpec, rank: int, error: str) -> RunStatus:
    """Makes the run's status final (FAILED with `error` unless it already ended); node 0 stops the group."""
    status = mark_failed(open_bucket(spec.bucket), spec.lang, spec.run_id, spec.env, error)
    log(f"run {spec.run_id}: {status.state}" + (f" ({status.error})" if status.error else ""))
    if rank == 0:
        stop_group(spec.project, spec.zone, spec.mig)
    else:
        log(f"node {rank}: node 0 stops the group")
    return status


def _failure(outcome: Outcome, spec: VmSpec, status: RunStatus | None = None) -> str:
    if outcome.timed_out:
        return f"stopped after max_run_hours={spec.max_run_hours:g}"
    text = f"trainer exited with code {outcome.code} without writing a final status"
    if outcome.code > 128:
        text += f" (signal {outcome.code - 128})"
    elif outcome.code == 1 and spec.nodes * spec.gpus_per_node > 1:
        text += " (torchrun: a worker process failed)"
    if status is not None:
        text += f"; it was at stage {status.stage!r}"
    return text


def exit_code(outcome: Outcome, status: RunStatus) -> int:
    """The agent's exit code once the run has a final status (see the module docstring)."""
    if outcome.timed_out and status.state == FAILED:
        return EXIT_DEADLINE
    if outcome.code == TrainerExit.SUCCEEDED and status.state != SUCCEEDED:
        return TrainerExit.FAILED
    return TrainerExit.FAILED if outcome.code == EXIT_SIGNALLED else outcome.code


def record_instance(md: MetadataClient, spec: VmSpec, name: str, rank: int) -> None:
    """One record per boot under <run>/metadata/instances/: which VMs ran the run (and preemptions)."""
    now = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    record = {
        "name": name,
        "id": md.get("instance/id"),
        "zone": spec.zone,
        "rank": rank,
        "machine_type": (md.get("instance/machine-type") or "").rsplit("/", 1)[-1] or None,
        "image": md.attribute("trainstack-image"),
        "booted_at": now,
    }
    try:
        open_bucket(spec.bucket).write_bytes(
            run_key(spec.lang, spec.run_id, f"metadata/instances/{name}/{now}.json"),
            json.dumps(record, indent=2).encode(),
        )
    except Exception as exc:  # a missing record must never stop a run
        log(f"could not record this instance in the run's metadata: {exc}")


def run_agent(md: MetadataClient, launcher: list[str] | None = None) -> int:
    """The whole VM-side run; `launcher` replaces `python -m trainer` / torchrun (test hook)."""
    spec = VmSpec.from_metadata(md)
    name = md.get("instance/name") or socket.gethostname()
    rank = node_rank(spec, name, md.attribute("trainstack-rank"))
    log(
        f"run {spec.run_id} ({spec.lang}, env {spec.env}) on {name}: node {rank} of {spec.nodes}, "
        f"{spec.gpus_per_node} GPU(s) per node, max_run_hours={spec.max_run_hours:g}"
        + (f", max_restarts={spec.max_restarts}" if spec.nodes > 1 else "")
    )
    record_instance(md, spec, name, rank)
    errors = ErrorRestarts(spec, rank, lambda: going_away(md))
    status = read_status(open_bucket(spec.bucket), spec.lang, spec.run_id)
    if status is not None and status.terminal:
        # A VM recreated after the end (or a group that was not stopped): finish the job.
        log(f"run already ended ({status.state}): not starting the trainer")
        end_run(spec, rank, "unused: the run already ended")
        return 0
    if spec.nodes > 1 and checkpointed(status):
        # Every interruption brings a new VM here: the budget holds even where torchrun's own
        # restart count started afresh (node 0 recreated).
        error = rejoin_or_end(errors, status)
        if error:
            log(f"not starting the trainer: {error}")
            return exit_code(Outcome(code=1), end_run(spec, rank, error))
    hardware = probe()
    wrong = problem(hardware, spec.gpus_per_node)
    if wrong:
        if (restart := errors.on_a_new_vm(name, hardware)) is True:
            return EXIT_SIGNALLED  # like a preemption: the group's new VM resumes the run
        wrong += restart
        # Every node alike: the same driver on each, and node 0 may be the one that cannot train.
        log(f"not starting the trainer: {wrong}")
        status = mark_failed(open_bucket(spec.bucket), spec.lang, spec.run_id, spec.env, wrong)
        log(f"run {spec.run_id}: {status.state}")
        stop_group(spec.project, spec.zone, spec.mig)
        return TrainerExit.FAILED
    with Forwarder() as fwd, NoticeWatch(md, fwd):
        outcome = run_trainer(spec, rank, launcher, fwd)
    if not (outcome.signalled and not outcome.timed_out):
        rescue(spec, name)  # before node 0 stops the group (the VM, and the container's files, go with it)
    if outcome.signalled and not outcome.timed_out:
        log("stopped by a signal (preemption or shutdown): group left as is; the run resumes on the next VM")
        return EXIT_SIGNALLED
    if outcome.code != 0 and not outcome.timed_out:
        why = going_away(md)
        if why:
            # Before any SIGTERM reached us (dockerd stopping first, or the trainer dying with
            # the network): an interruption, not a failure. The next VM resumes the run.
            log(
                f"trainer exited with code {outcome.code} ({why}): counted as an interruption; "
                "group left as is, the run resumes on the next VM"
            )
            return EXIT_SIGNALLED
    if rank != 0 and outcome.code == 0 and not outcome.timed_out:
        # A worker may finish before node 0 has written SUCCEEDED: node 0 owns the final status.
        log(f"node {rank}: trainer done; node 0 writes the final status and stops the group")
        return 0
    return exit_code(outcome, end_run(spec, rank, outcome.error or _failure(outcome, spec)))


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
