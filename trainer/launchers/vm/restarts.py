"""The VM agent's part of the bounded restart rule (trainer.launchers.restarts): record a restart, or say why the
run ends, for a failure the agent read as not the code's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trainer.launchers.restarts import restart_records, take_restart
from trainer.launchers.vm import log
from trainer.launchers.vm.group import recreate_instance
from trainer.launchers.vm.hardware import Hardware, driver_not_loaded
from trainer.launchers.vm.spec import VmSpec
from trainer.storage import open_bucket


def restarts_so_far(spec: VmSpec) -> list[dict]:
    """The run's restarts after errors (the bucket is not even opened where the policy allows none)."""
    if not spec.max_restarts_on_errors:
        return []
    return restart_records(open_bucket(spec.bucket), spec.lang, spec.run_id, spec.restart_policy)


@dataclass
class ErrorRestarts:
    """The bounded restart rule (trainer.launchers.restarts) for node `rank` of a run. `going_away`: the agent's
    question whether this VM is being preempted or shut down (None: it is not); a failure then is the
    preemption's, which the interruption rule resumes on the next VM, so it spends no restart.

    The nodes of a multi-node run meet a run-wide failure together (an exit code every rank ends with, a lost peer,
    a rendezvous that timed out) and each asks to restart: the failure is named by the restarts the run had when
    this node's trainer started (`after`), so the run counts it once, and a failure of the restarted trainers is a
    new one (never a loop)."""

    spec: VmSpec
    rank: int
    going_away: Callable[[], str | None]
    after: int = field(default=-1)  # the run's restarts when this node's trainer started (-1: read at the first)

    def restart(
        self, code: int | None, cause: str | None, *, infrastructure: bool = False, node_only: bool = False
    ) -> bool | str:
        """True: a restart is recorded, start the trainer again; else what the run's error adds: "; " and why it
        ends (such a failure past max_restarts_on_errors), or "" (not such a failure). Infrastructure causes are
        the agent's own reading: said only where restarts after errors are allowed. `node_only`: a failure of this
        VM alone (its driver), counted for each node that meets it."""
        spec, policy = self.spec, self.spec.restart_policy
        if cause is None or (infrastructure and not policy.max_restarts_on_errors):
            return ""
        why = self.going_away()
        if why:
            log(f"not restarting here: {why}")
            return ""
        where = {"launcher": "vm", "node": self.rank, "zone": spec.zone}
        bucket = open_bucket(spec.bucket)
        event = None
        if spec.nodes > 1 and not node_only:
            if self.after < 0:
                self.after = len(restarts_so_far(spec))
            event = f"run-wide failure after restart {self.after}"
        restarted, line = take_restart(
            bucket, spec.lang, spec.run_id, policy, cause, code=code, where=where, event=event
        )
        log(line)
        if restarted and event is not None:
            self.after = len(restarts_so_far(spec))  # the restarted trainers' failures are new ones
        return True if restarted else f"; {line}"

    def on_a_new_vm(self, name: str, hardware: Hardware) -> bool | str:
        """A node that cannot train: where its GPU driver did not load (hardware.driver_not_loaded), True when a
        restart is recorded and the group asked to recreate this VM (the next one resumes the run); otherwise as
        `restart` ("": a driver too old, the settings' to fix)."""
        if not driver_not_loaded(hardware, self.spec.gpus_per_node):
            return ""
        verdict = self.restart(None, f"a GPU driver that did not load on {name}", infrastructure=True, node_only=True)
        if verdict is True:
            recreate_instance(self.spec.project, self.spec.zone, self.spec.mig, name)
        return verdict
