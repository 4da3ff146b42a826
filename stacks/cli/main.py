"""trainctl: train per-language ULMFiT classifiers on stacks declared with CDKTF."""
from __future__ import annotations

from typing import Annotated

import typer
from typer.core import TyperGroup

from stacks.cli import (bootstrap_cmd, common, config_cmd, data_cmd, doctor_cmd, image_cmd, infra_cmds, lm_cmd,
                        models_cmd, quota_cmd, runs_cmds, train_cmd)


class DebugAnywhere(TyperGroup):
    """trainctl's root command: `--debug` is taken out of the arguments (common.decide_debug) before they are
    parsed, so it goes anywhere on the line without every command declaring it."""

    def main(self, args=None, *rest, **options):
        import sys

        given = list(sys.argv[1:] if args is None else args)
        return super().main(common.decide_debug(given), *rest, **options)


# Shell completion (--install-completion) starts trainctl on every <TAB>: the command modules keep their
# heavy imports inside their commands, so that start stays near --help's (~0.2 s).
app = typer.Typer(
    cls=DebugAnywhere, help="Train per-language text classifiers on infrastructure declared as CDKTF stacks.",
    no_args_is_help=True, pretty_exceptions_enable=False, add_completion=True,
)
# Every command module registers its commands (or its sub-app) the same way.
for module in (config_cmd, data_cmd, image_cmd, lm_cmd, bootstrap_cmd, infra_cmds, quota_cmd, doctor_cmd, train_cmd,
               runs_cmds, models_cmd):
    module.register(app)


# A flag takes no value, but typer's help shows the type of every option (`--debug <bool>` reads as
# `--debug true`): an empty metavar leaves the type out. DebugAnywhere reads it; it is declared for the help.
DebugOpt = Annotated[bool, typer.Option(common.DEBUG_FLAG, metavar="", help=(
    f"show tracebacks and terraform output (anywhere on the line, or {common.DEBUG_ENV}=1)"))]


@app.callback()
def main(debug: DebugOpt = False):
    """Train per-language text classifiers on infrastructure declared as CDKTF stacks."""


def run() -> None:
    app()
