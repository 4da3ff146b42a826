"""`train-<lang>`: the infrastructure of one language's training run."""

from __future__ import annotations

from typing import Callable

from constructs import Construct

from stacks.cdk import TerraformOutput, TerraformStack, TerraformVariable
from stacks.config import EnvConfig


class TrainStack(TerraformStack):
    """What every target's training stack shares: the run id variable and the outputs `trainctl` reads.

    `part` adds the target's own resources (its backend, the machines that run the trainer) and returns the
    run id as the apply fixes it (stacks.targets.Target.training_part)."""

    def __init__(
        self, scope: Construct, id: str, *, config: EnvConfig, lang: str, part: Callable[["TrainStack"], str]
    ) -> None:
        super().__init__(scope, id)
        self.run_id_var = TerraformVariable(
            self,
            "run_id",
            type="string",
            default="",
            description="run folder name; empty = generated at apply time (trainctl always sets it)",
        )
        # Written as HCL: cdktf's Op.neq renders "" as `undefined`.
        self.run_id_expression = (
            '${var.run_id != "" ? var.run_id : join("-", '
            '[formatdate("YYYYMMDD-hhmmss", plantimestamp()), substr(uuid(), 0, 4)])}'
        )
        run_id = part(self)
        TerraformOutput(self, "run_id_out", value=run_id, static_id=True).override_logical_id("run_id")
        TerraformOutput(self, "lang", value=lang, static_id=True)
        TerraformOutput(self, "env", value=config.env, static_id=True)
