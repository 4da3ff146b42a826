"""`trainctl doctor`: read-only checks of an environment before a first run (each target owns its checks)."""

from __future__ import annotations

from typing import Annotated

import typer

from stacks.cli.common import EnvOpt, SetOpt, console, emit_json, json_on_stdout, load
from stacks.errors import ExitStatus

DoctorJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help=(
            "print JSON on stdout once every check ran, the lines on stderr: {env, target, ok, checks, not_checked}; "
            "checks: one {name, ok, detail, hint} per check (hint: what to do when not ok, else null); ok: all are; "
            "not_checked: what doctor cannot check, in words"
        ),
    ),
]


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


def doctor(env: EnvOpt = "local", sets: SetOpt = None, as_json: DoctorJsonOpt = False):
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

    with json_on_stdout(as_json):  # the lines as each check ends: a slow check (a cloud API) shows progress
        checks, not_checked = target_of(config).doctor(config, show)
        for line in zone_lines(config):
            console.print(line, markup=False, soft_wrap=True)
        console.print(f"not checked: {not_checked}", markup=False, soft_wrap=True)
    if as_json:
        emit_json(
            {
                "env": config.env,
                "target": config.target,
                "ok": all(c.ok for c in checks),
                "checks": [
                    {"name": c.name, "ok": c.ok, "detail": c.detail, "hint": (c.fix or None) if not c.ok else None}
                    for c in checks
                ],
                "not_checked": not_checked,
            }
        )
    if not all(c.ok for c in checks):
        raise typer.Exit(ExitStatus.INFRA_ERROR)


def zone_lines(config) -> list[str]:
    """A line per language whose runs choose among zones: the order a new run tries them in (`trainctl zones`)."""
    from stacks.runs.zone_ranking import rank_zones
    from stacks.targets import target_of
    from trainer.storage import open_bucket

    target, out = target_of(config), []
    try:
        bucket = open_bucket(config.bucket)
    except Exception:  # no history then (the bucket check says why)
        bucket = None
    for lang in config.languages:
        if not target.zones(config, lang):
            continue
        try:
            ranking = rank_zones(target, config, lang, bucket)
        except Exception as exc:  # the order is advice: doctor's checks stand without it
            out.append(f"zones  {lang}: not ranked ({exc})")
            continue
        out.append(
            f"zones  {lang}: {', '.join(ranking.order())} ({ranking.source_line()}; why: trainctl zones {lang} "
            f"--env {config.env})"
        )
    return out
