"""One run as every target's launcher reads it: what to run (`python -m trainer` and its arguments), where its
files go, how many machines, for how long and how often it may be restarted. Built by the operator's lifecycle from
the settings every target shares (stacks.config.trainer_command.run_spec) and carried with the run; a target adds
what is its own (gcp: trainer.launchers.vm.spec.VmSpec's machine, image and zone; local: LocalLaunch's cores)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RunSpec:
    env: str
    lang: str
    bucket: str  # the env's bucket URI
    trainer_args: tuple[str, ...]  # `python -m trainer`'s arguments, except --run-id
    nodes: int = 1
    spot: bool = True  # the run's rung is Spot (preemptible)
    rung: str = "spot"  # the capacity it asks for: spot, flex_start (queued, all nodes at once) or on_demand
    max_run_hours: float = 6.0
    max_restarts: int = 3  # times an interrupted (preempted) run is resumed
    max_restarts_on_errors: int = 0  # times a failure not the code's is restarted (trainer.launchers.restarts)
    restart_on_exit_codes: tuple[int, ...] = ()  # the trainer's exit statuses that are such a failure
    run_id: str = ""  # the run's id, or the expression the apply resolves it from (for_run)

    def for_run(self, run_id: str) -> "RunSpec":
        return replace(self, run_id=run_id)

    @property
    def trainer_command_args(self) -> list[str]:
        """The trainer's arguments for this run (its id included)."""
        if not self.run_id:
            raise ValueError(f"the run spec of {self.lang} has no run id yet (RunSpec.for_run)")
        return [*self.trainer_args, "--run-id", self.run_id]
