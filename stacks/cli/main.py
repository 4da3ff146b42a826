"""trainctl: train per-language ULMFiT classifiers on stacks declared with CDKTF."""
from __future__ import annotations

from typing import Annotated

import typer

from stacks.cli import bootstrap_cmd, common, config_cmd, data_cmd, image_cmd, infra_cmds, quota_cmd, runs_cmds, train_cmd
from stacks.cli import doctor_cmd, lm_cmd

app = typer.Typer(
    help="Train per-language text classifiers on infrastructure declared as CDKTF stacks.",
    no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
)
app.add_typer(config_cmd.app, name="config")
app.add_typer(data_cmd.app, name="data")
app.add_typer(image_cmd.app, name="image")
app.add_typer(lm_cmd.app, name="lm")
bootstrap_cmd.register(app)
infra_cmds.register(app)
quota_cmd.register(app)
doctor_cmd.register(app)
train_cmd.register(app)
runs_cmds.register(app)


@app.callback()
def main(debug: Annotated[bool, typer.Option("--debug", help="show tracebacks and terraform output")] = False):
    """Train per-language text classifiers on infrastructure declared as CDKTF stacks."""
    common.STATE["debug"] = debug


def run() -> None:
    app()
