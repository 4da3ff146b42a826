"""LocalTrainer: the local target's stand-in for a GPU instance group.

Terraform's built-in `terraform_data` with local-exec provisioners: create
starts the trainer detached under its supervisor; destroy stops it if it is
still running. No provider download, so it plans and applies offline.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from constructs import Construct

from stacks.cdk import LocalExecProvisioner
from stacks.constructs.run_identity import RunIdentity


class LocalTrainer(Construct):
    """Exposes `process` (the terraform_data resource) and `run_id` (from its output)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        run_id: str,
        replace_on: str,
        python: str,
        workdir: Path,
        procs_dir: Path,
        max_run_hours: float,
        trainer_args: list[str],
        processes: int = 1,
        max_restarts: int = 3,
        cores: int = 0,
        cores_dir: Path | None = None,
        zone: str | None = None,
        market: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        supervisor = [python, "-m", "trainer.launchers.local.supervisor"]
        # Destroy-time provisioners may only reference `self`: the run id is its output.
        state_dir = f"{shlex.quote(str(procs_dir))}/${{self.output.run_id}}"
        start = " ".join(
            [
                *map(shlex.quote, supervisor),
                "start",
                "--state-dir",
                state_dir,
                "--max-run-hours",
                str(max_run_hours),
                "--processes",
                str(processes),
                "--max-restarts",
                str(max_restarts),
                *(["--cores", str(cores), "--cores-dir", shlex.quote(str(cores_dir))] if cores_dir else []),
                *(["--zone", shlex.quote(zone), "--market", shlex.quote(market)] if market and zone else []),
                "--",
                *map(shlex.quote, trainer_args),
                "--run-id",
                "${self.output.run_id}",
            ]
        )
        stop = " ".join([*map(shlex.quote, supervisor), "stop", "--state-dir", state_dir])
        identity = RunIdentity(
            self,
            "process",
            run_id=run_id,
            replace_on=replace_on,
            provisioners=[
                LocalExecProvisioner(type="local-exec", command=start, working_dir=str(workdir)),
                LocalExecProvisioner(type="local-exec", command=stop, working_dir=str(workdir), when="destroy"),
            ],
        )
        self.process, self.run_id = identity.record, identity.run_id
