"""trainctl: train per-language ULMFiT classifiers on stacks declared with CDKTF."""
from __future__ import annotations

from typing import Annotated

import typer

from stacks.cli import (bootstrap_cmd, common, config_cmd, data_cmd, doctor_cmd, image_cmd, infra_cmds, lm_cmd,
                        models_cmd, quota_cmd, runs_cmds, train_cmd)

app = typer.Typer(
    help="Train per-language text classifiers on infrastructure declared as CDKTF stacks.",
    no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
)
# Every command module registers its commands (or its sub-app) the same way.
for module in (config_cmd, data_cmd, image_cmd, lm_cmd, bootstrap_cmd, infra_cmds, quota_cmd, doctor_cmd, train_cmd,
               runs_cmds, models_cmd):
    module.register(app)


# A flag takes no value, but typer's help shows the type of every option (`--debug <bool>` reads as
# `--debug true`): an empty metavar leaves the type out.
DebugOpt = Annotated[bool, typer.Option("--debug", metavar="", help="show tracebacks and terraform output "
                                        "(before the command: trainctl --debug COMMAND)")]


@app.callback()
def main(debug: DebugOpt = False):
    """Train per-language text classifiers on infrastructure declared as CDKTF stacks."""
    common.STATE["debug"] = debug


def run() -> None:
    app()
