"""`trainctl config ...`"""

from __future__ import annotations

import json
from typing import Annotated

import typer
import yaml

from stacks.cli.common import EnvOpt, SetOpt, load

app = typer.Typer(help="Inspect the effective configuration.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="config")


@app.command("show")
def show(
    env: EnvOpt = "local",
    sets: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of YAML")] = False,
):
    """Print the effective config: envs/base.yaml + envs/<env>.yaml + --set, validated."""
    _, config = load(env, sets)
    data = config.as_document()
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        typer.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
