"""The local target's part of `train-<lang>`: Terraform state in a local file, the trainer a process here."""

from __future__ import annotations

from stacks.cdk import LocalBackend
from stacks.config import EnvConfig
from stacks.config.trainer_command import trainer_args
from stacks.targets.local.host import LocalHost
from stacks.targets.local.local_trainer import LocalTrainer


def add_local_part(stack, *, config: EnvConfig, lang: str, host: LocalHost) -> str:
    """Adds `stack.trainer` (LocalTrainer) -> the run id as applied."""
    s = config.language(lang)
    LocalBackend(stack, path=str(host.state_file))
    stack.trainer = LocalTrainer(
        stack,
        "trainer",
        run_id=stack.run_id_expression,
        replace_on=stack.run_id_var.string_value,
        python=host.python,
        workdir=host.workdir,
        procs_dir=host.procs_dir,
        max_run_hours=s.max_run_hours,
        trainer_args=trainer_args(config, lang),
        processes=s.local.processes,
        max_restarts=s.max_restarts,
        cores=s.local.cores,
        cores_dir=host.cores_dir,
        zone=host.zone,
        market=host.market,
    )
    return stack.trainer.run_id
