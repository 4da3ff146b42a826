"""The local target's part of `train-<lang>`: Terraform state in a local file, the trainer a process here."""

from __future__ import annotations

from stacks.cdk import LocalBackend
from stacks.targets.local.host import LocalHost
from stacks.targets.local.local_trainer import LocalTrainer
from stacks.targets.local.settings import LocalLanguageSettings
from trainer.launchers.run_spec import RunSpec


def add_local_part(stack, *, spec: RunSpec, settings: LocalLanguageSettings, host: LocalHost) -> str:
    """Adds `stack.trainer` (LocalTrainer) -> the run id as applied."""
    LocalBackend(stack, path=str(host.state_file))
    stack.trainer = LocalTrainer(
        stack,
        "trainer",
        spec=spec,
        run_id=stack.run_id_expression,
        replace_on=stack.run_id_var.string_value,
        host=host,
        processes=settings.processes,
        cores=settings.cores,
    )
    return stack.trainer.run_id
