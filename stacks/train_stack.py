"""`train-<lang>`: the infrastructure of one language's training run."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cdktf import LocalBackend, TerraformOutput, TerraformStack, TerraformVariable
from constructs import Construct

from stacks.config import EnvConfig
from stacks.constructs.local_trainer import LocalTrainer


@dataclass(frozen=True)
class LocalHost:
    """What the local target needs to know about this machine (passed in, never read here)."""

    python: str
    workdir: Path
    procs_dir: Path
    state_file: Path


def trainer_args(config: EnvConfig, lang: str) -> list[str]:
    """The `python -m trainer` arguments of a language, except --run-id."""
    s = config.language(lang)
    return ["--lang", lang, "--bucket", config.bucket, "--env", config.env,
            "--text-col", s.data.text_col, "--label-col", s.data.label_col, "--label-sep", s.data.label_sep,
            *s.trainer.as_cli_args()]


class TrainStack(TerraformStack):
    """Exposes `run_id_var` and, on the local target, `trainer` (a LocalTrainer)."""

    def __init__(self, scope: Construct, id: str, *, config: EnvConfig, lang: str, local: LocalHost | None) -> None:
        super().__init__(scope, id)
        settings = config.language(lang)
        self.run_id_var = TerraformVariable(
            self, "run_id", type="string", default="",
            description="run folder name; empty = generated at apply time (trainctl always sets it)",
        )
        explicit = self.run_id_var.string_value
        # Written as HCL: cdktf's Op.neq renders "" as `undefined`.
        run_id = ('${var.run_id != "" ? var.run_id : join("-", '
                  '[formatdate("YYYYMMDD-hhmmss", plantimestamp()), substr(uuid(), 0, 4)])}')
        if config.target == "local":
            if local is None:
                raise ValueError("the local target needs a LocalHost")
            LocalBackend(self, path=str(local.state_file))
            self.trainer = LocalTrainer(
                self, "trainer", run_id=run_id, replace_on=explicit, python=local.python,
                workdir=local.workdir, procs_dir=local.procs_dir, max_run_hours=settings.max_run_hours,
                trainer_args=trainer_args(config, lang),
            )
            TerraformOutput(self, "run_id_out", value=self.trainer.run_id, static_id=True).override_logical_id("run_id")
        else:
            raise NotImplementedError("target gcp: the train stack is not implemented yet")
        TerraformOutput(self, "lang", value=lang, static_id=True)
        TerraformOutput(self, "env", value=config.env, static_id=True)
