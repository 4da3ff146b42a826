"""trainctl: train per-language ULMFiT classifiers on stacks declared with CDKTF."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from stacks.cli import (
    common,
    config_cmd,
    data_cmd,
    doctor_cmd,
    infra_cmds,
    lm_cmd,
    models_cmd,
    runs_cmds,
    train_cmd,
    zones_cmd,
)


class RootCommand(TyperGroup):
    """trainctl's root command. `--debug` is taken out of the arguments (common.decide_debug) before they are
    parsed, so it goes anywhere on the line without every command declaring it. Every command runs inside its
    `invoke`, so an exception a command leaves is told there, once (common.exit_for): the console script and
    a test's CliRunner, which both enter through `main`, read the same message and exit status."""

    def main(self, args=None, *rest, **options):
        given = list(sys.argv[1:] if args is None else args)
        return super().main(common.decide_debug(given), *rest, **options)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise  # an exit status a command chose, or click's own usage errors (exit 2), told by click
        except (Exception, KeyboardInterrupt) as exc:
            raise common.exit_for(exc) from None


# Shell completion (--install-completion) starts trainctl on every <TAB>: the command modules keep their
# heavy imports inside their commands, so that start stays near --help's (~0.2 s).
app = typer.Typer(
    cls=RootCommand,
    help="Train per-language text classifiers on infrastructure declared as CDKTF stacks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
# Every command module registers its commands (or its sub-app) the same way.
for module in (config_cmd, data_cmd, lm_cmd, infra_cmds, doctor_cmd, zones_cmd, train_cmd, runs_cmds, models_cmd):
    module.register(app)


def register_target_commands(root: typer.Typer) -> None:
    """Each registered target adds its own commands (gcp: quota, image build, bootstrap), built from the options
    and helpers every command uses."""
    from types import SimpleNamespace

    from stacks.cli.run_console import print_table
    from stacks.targets import by_name, registered

    kit = SimpleNamespace(
        env_option=common.EnvOpt,
        set_option=common.SetOpt,
        load=common.load,
        console=common.console,
        err_console=common.err_console,
        print_table=print_table,
    )
    for name in registered():
        by_name(name).register_commands(root, kit)


register_target_commands(app)


# A flag takes no value, but typer's help shows the type of every option (`--debug <bool>` reads as
# `--debug true`): an empty metavar leaves the type out. RootCommand reads it; it is declared for the help.
DebugOpt = Annotated[
    bool,
    typer.Option(
        common.DEBUG_FLAG,
        metavar="",
        help=(f"show tracebacks and terraform output (anywhere on the line, or {common.DEBUG_ENV}=1)"),
    ),
]


@app.callback()
def main(debug: DebugOpt = False):
    """Train per-language text classifiers on infrastructure declared as CDKTF stacks."""


def run() -> None:
    app()
