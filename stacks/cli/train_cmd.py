"""`trainctl train`: apply the language's stack, follow the run, tear it down."""
from __future__ import annotations

from typing import Annotated

import typer

from stacks.cli.common import EnvOpt, LangArg, SetOpt, mapped_errors
from stacks.cli.run_view import run_job

DetachOpt = Annotated[bool, typer.Option("--detach", help="return once the stack is applied")]


def register(app: typer.Typer) -> None:
    app.command("train")(train)


@mapped_errors
def train(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None, detach: DetachOpt = False):
    """Apply train-LANG, follow the run, destroy the stack, print metrics and artifact URIs."""
    run_job(lang, env, sets, detach, job="classifier")
