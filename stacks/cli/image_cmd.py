"""`trainctl image build`: the trainer image, built by Cloud Build (no local Docker needed)."""
from __future__ import annotations

import typer

from stacks.cli.common import EnvOpt, SetOpt, err_console, load, mapped_errors

app = typer.Typer(help="Build the trainer image (Cloud Build, Artifact Registry).", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="image")


@app.command("build")
@mapped_errors
def build(env: EnvOpt = "local", sets: SetOpt = None):
    """Build and push the trainer image, tagged with the hash of its build context.

    Skips the build when the registry already has that tag (tags are immutable: a tree that
    changes what the image holds gets a new tag, and so a new build).
    Prints the image reference on stdout and the progress on stderr.
    """
    from stacks.targets.gcp.image import SOURCE_ROOT, submit_build

    _, config = load(env, sets)
    config.require_target("gcp", f"env {env!r} has target {config.target!r}: image build applies to gcp environments; "
            "the local target runs the trainer from this checkout", hint="pick a gcp env, e.g. --env dev")

    def say(line: str) -> None:
        err_console.print(line, markup=False, soft_wrap=True)

    result = submit_build(config, SOURCE_ROOT, echo=say)
    say(f"built and pushed {result.ref}" if result.built else f"found {result.ref}")
    typer.echo(result.ref)
