"""Bounded restarts after a failure that is not the code's fault: one rule for both launchers
(local/supervisor.py, vm/agent.py), beside the interruption rule (trainer.launchers.interruptions).

A failure may be restarted only when the trainer ended without recording how the run ended (a FAILED status is a
Python exception or bad data, exit 2 is bad input: the code's or the user's to fix, never restarted) and either
- its exit status is one of `restart_on_exit_codes` (a death by signal N reads 128 + N, as a shell says it), or
- the launcher saw infrastructure fail (the VM agent, trainer.launchers.vm.restarts: a trainer that stopped on a
  lost peer, NCCL or gloo, with no preemption on its VM; the nodes of a multi-node run not meeting again within
  the join timeout; a node whose GPU driver did not load, which the group recreates).
Each restart is recorded in the run's metadata/restarts.json (trainer.runfiles.restarts) and its log.txt; the
count is the run's, so restart `max_restarts_on_errors` + 1 ends the run FAILED, naming the limit. The restarted
trainer resumes from the run's newest checkpoint (status.json `resumed` + 1), like a preempted one."""

from __future__ import annotations

import time
from dataclasses import dataclass

from trainer.errors import TrainerExit
from trainer.runfiles.keys import run_key
from trainer.runfiles.restarts import append_restart, read_restarts
from trainer.runfiles.status_file import RunStatus

NEVER_RESTARTED = (TrainerExit.SUCCEEDED, TrainerExit.BAD_INPUT)


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell says it: 128 + N for a death by signal N (Popen gives -N)."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts_on_errors: int = 0
    restart_on_exit_codes: tuple[int, ...] = ()

    def cause(self, code: int, status: RunStatus | None) -> str | None:
        """Why a trainer that exited with status `code` may be restarted (None: its failure ends the run)."""
        if status is not None and status.terminal:
            return None  # the trainer (or a rank) recorded the failure: its code's or its data's
        if code in NEVER_RESTARTED or code not in self.restart_on_exit_codes:
            return None
        return f"exit code {code} (restart_on_exit_codes)"


def restart_records(bucket, lang: str, run_id: str, policy: RestartPolicy) -> list[dict]:
    """The run's restarts after errors so far (none read where the policy allows none: there can be none)."""
    return read_restarts(bucket, lang, run_id) if policy.max_restarts_on_errors else []


def take_restart(
    bucket,
    lang: str,
    run_id: str,
    policy: RestartPolicy,
    cause: str,
    *,
    code: int | None,
    where: dict,
    event: str | None = None,
) -> tuple[bool, str]:
    """(True, the log line) after recording restart n of the run for `cause`; (False, why the run ends) when
    the run has had its max_restarts_on_errors. `where`: what the record says of the machine (node, zone).
    `event`: names a failure every node of the run meets (trainer.runfiles.restarts.append_restart): the node
    that comes second restarts under the first one's record."""
    records = restart_records(bucket, lang, run_id, policy)
    limit = policy.max_restarts_on_errors
    recorded = next((r for r in records if event is not None and r.get("event") == event), None)
    if recorded is None:
        if len(records) >= limit:
            after = f" after {len(records)} restart(s)" if records else ""
            return False, f"{cause}{after}: max_restarts_on_errors={limit} reached"
        recorded, added = append_restart(
            bucket, lang, run_id, {"cause": cause, "exit_code": code, **where}, event=event
        )
        if added:
            line = f"restart {recorded['restart']} of {limit} after {cause}: resuming from the newest checkpoint"
            # the run log's own form (trainer.runtime.runlog)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            bucket.append(run_key(lang, run_id, "log.txt"), f"{stamp} {line}\n".encode())
            return True, line
    # another node met this failure first: this one restarts under its record
    return True, f"restart {recorded['restart']} of {limit} after {cause} (recorded by node {recorded.get('node')})"
