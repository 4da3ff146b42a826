"""`trainctl doctor`: read-only checks of a gcp environment before a first run."""
from __future__ import annotations

import typer

from stacks.cli.common import EnvOpt, SetOpt, console, load, mapped_errors
from stacks.errors import ExitStatus


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


@mapped_errors
def doctor(env: EnvOpt = "local", sets: SetOpt = None):
    """Check a gcp env (read-only): APIs, image, boot images, Private Google Access, org policies, quota.

    One line per check: ok, or the problem and what to do. Exit 0 when all are ok, 3 otherwise.
    """
    from stacks.gcp.doctor import NOT_CHECKED, run_checks

    _, config = load(env, sets)
    config.require_target("gcp", f"env {env!r} has target {config.target!r}: doctor checks gcp environments",
            hint="pick a gcp env, e.g. --env dev")

    def show(check) -> None:
        mark = "[green]ok[/]     " if check.ok else "[red]problem[/]"
        console.print(f"{mark} {check.name}: {check.detail}", markup=True, soft_wrap=True)
        if not check.ok and check.fix:
            console.print(f"        → {check.fix}", markup=False, soft_wrap=True)

    checks = run_checks(config, show)
    console.print(f"not checked: {NOT_CHECKED}", markup=False, soft_wrap=True)
    if not all(c.ok for c in checks):
        raise typer.Exit(ExitStatus.INFRA_ERROR)
