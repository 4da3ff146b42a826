"""LocalTrainer: the local target's stand-in for a GPU instance group.

Terraform's built-in `terraform_data` with local-exec provisioners: create
starts the trainer detached under its supervisor; destroy stops it if it is
still running. No provider download, so it plans and applies offline.
"""

from __future__ import annotations

import shlex

from constructs import Construct

from stacks.cdk import LocalExecProvisioner
from stacks.constructs.run_identity import RunIdentity
from stacks.targets.local.host import LocalHost
from trainer.launchers.local.launch import MODULE, LocalLaunch
from trainer.launchers.run_spec import RunSpec

# Destroy-time provisioners may only reference `self`: the run id is the record's output.
RUN_ID = "${self.output.run_id}"


class LocalTrainer(Construct):
    """Exposes `process` (the terraform_data resource) and `run_id` (from its output)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        spec: RunSpec,
        run_id: str,
        replace_on: str,
        host: LocalHost,
        processes: int = 1,
        cores: int = 0,
    ) -> None:
        super().__init__(scope, id)
        launch = LocalLaunch.of(
            spec.for_run(RUN_ID),
            f"{host.procs_dir}/{RUN_ID}",
            processes=processes,
            cores=cores,
            cores_dir=str(host.cores_dir),
            zone=host.zone,
            market=host.market,
        )
        supervisor = [host.python, "-m", MODULE]
        start, stop = (" ".join(map(shlex.quote, [*supervisor, *launch.argv(a)])) for a in ("start", "stop"))
        identity = RunIdentity(
            self,
            "process",
            run_id=run_id,
            replace_on=replace_on,
            provisioners=[
                LocalExecProvisioner(type="local-exec", command=start, working_dir=str(host.workdir)),
                LocalExecProvisioner(type="local-exec", command=stop, working_dir=str(host.workdir), when="destroy"),
            ],
        )
        self.process, self.run_id = identity.record, identity.run_id
