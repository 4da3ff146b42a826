"""`trainctl doctor`: read-only checks of an environment before a first run (each target owns its checks)."""
from __future__ import annotations

import typer

from stacks.cli.common import EnvOpt, SetOpt, console, load, mapped_errors
from stacks.errors import ExitStatus


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


@mapped_errors
def doctor(env: EnvOpt = "local", sets: SetOpt = None):
    """Check an env (read-only) before a first run. gcp: APIs, image, boot images, Private Google Access,
    org policies, quota, the accounts' access. local: terraform, node, the trainer's packages, the bucket folder.

    One line per check: ok, or the problem and what to do. Exit 0 when all are ok, 3 otherwise.
    """
    from stacks.targets import target_of

    _, config = load(env, sets)

    def show(check) -> None:
        mark = "[green]ok[/]     " if check.ok else "[red]problem[/]"
        console.print(f"{mark} {check.name}: {check.detail}", markup=True, soft_wrap=True)
        if not check.ok and check.fix:
            console.print(f"        → {check.fix}", markup=False, soft_wrap=True)

    checks, not_checked = target_of(config).doctor(config, show)
    console.print(f"not checked: {not_checked}", markup=False, soft_wrap=True)
    if not all(c.ok for c in checks):
        raise typer.Exit(ExitStatus.INFRA_ERROR)
