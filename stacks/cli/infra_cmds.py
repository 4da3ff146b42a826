"""`trainctl synth | plan | apply | destroy | gc`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stacks.cli.common import STATE, EnvOpt, LangArg, SetOpt, check_output_file, console, load
from stacks.cli.run_console import ConsoleReporter
from stacks.errors import ConfigError, ExitStatus, TrainstackError

PLAN_CHANGES = ExitStatus.PLAN_CHANGES


def register(app: typer.Typer) -> None:
    app.command("synth")(synth)
    app.command("plan")(plan)
    app.command("apply")(apply)
    app.command("destroy")(destroy)
    app.command("gc")(gc)


def synth(
    env: EnvOpt = "local",
    sets: SetOpt = None,
    outdir: Annotated[Path, typer.Option(help="output folder")] = Path("cdktf.out"),
):
    """Synthesize every stack of the environment to cdktf.out/stacks/*."""
    from stacks.app import synth as synth_app

    project, config = load(env, sets)
    target = outdir if outdir.is_absolute() else project.root / outdir
    names = synth_app(config, project, target)
    for name in names:
        console.print(f"{target / 'stacks' / name / 'cdk.tf.json'}")


def _show(stack: str, text: str) -> None:
    """A stack's plan as Terraform prints it."""
    console.print(f"[bold]{stack}[/]")
    console.print(text, markup=False)


ArtifactOpt = Annotated[
    str, typer.Option(help="where reviewers find the full plans; named where the Markdown cuts detail to fit a comment")
]
JsonOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--json-out",
        help="also write the plans' `terraform show -json`: to FILE.json (one stack: its "
        "document; several: a bundle of them), or to DIR/<env>/<stack>.json",
    ),
]
FromJsonOpt = Annotated[
    bool,
    typer.Option(
        "--from-json",
        help="render the saved plan JSON FILES (`terraform show -json` output) instead of "
        "planning: no Terraform, no credentials; needs --markdown",
    ),
]
ExpectEnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--expect-env",
        help="with --from-json: an env that must have plans; shown as failed when it has "
        "none (its job died before planning)",
    ),
]
PreflightOpt = Annotated[
    bool,
    typer.Option(
        help="gcp: quota zone choice and image check before synth "
        "(--no-preflight: first preferred zone, no quota or "
        "image API calls)"
    ),
]
PricesOpt = Annotated[
    bool,
    typer.Option(
        help="gcp: price each training stack's VMs from the Cloud Billing "
        "Catalog and store the quote with the plan (--no-prices: "
        "the review uses the dated fallback table)"
    ),
]


def plan(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="with --from-json: plan JSON files or folders of them", show_default=False),
    ] = None,
    env: EnvOpt = "local",
    sets: SetOpt = None,
    stack: Annotated[str | None, typer.Option(help="only this stack, e.g. train-fr or foundation")] = None,
    markdown: Annotated[Path | None, typer.Option(help="also write the review as Markdown to FILE")] = None,
    json_out: JsonOutOpt = None,
    from_json: FromJsonOpt = False,
    artifact: ArtifactOpt = "the plan JSON files (`trainctl plan --json-out`)",
    expect_env: ExpectEnvOpt = None,
    preflight: PreflightOpt = True,
    prices: PricesOpt = True,
    lock: Annotated[bool, typer.Option(help="lock the state while planning (--no-lock for read-only CI)")] = True,
    force: Annotated[bool, typer.Option("--force", help="let --markdown replace an existing file")] = False,
):
    """Show the Terraform plan of the environment's stacks (after the quota/image preflight on gcp).

    Exit status: 0 no changes, 4 changes present, 3 Terraform (or cloud) error, 2 bad usage or config.
    With --from-json it only renders (0 when written).
    """
    from stacks.plan_render import render_markdown

    _check_plan_args(files, markdown, from_json=from_json, force=force)
    if from_json:
        _render_saved_plans(files, markdown, artifact=artifact, expect_env=expect_env or [])
        return
    from stacks.plan_render.review import plan_stacks

    results, first_error = plan_stacks(
        env,
        sets,
        stack,
        json_out,
        preflight=preflight,
        prices=prices,
        lock=lock,
        keep_going=bool(markdown or json_out),
        show=_show,
        reporter=ConsoleReporter(),
        echo=console.print if STATE["debug"] else None,
    )
    plans = [r.plan for r in results]
    if markdown:
        markdown.write_text(render_markdown(plans, artifact=artifact))
    if first_error is not None:
        raise first_error
    _exit_on_changes(plans)


def _check_plan_args(files: list[Path] | None, markdown: Path | None, *, from_json: bool, force: bool) -> None:
    """Plan files go with --from-json, which needs --markdown; a refused usage raises ConfigError."""
    if files and not from_json:
        raise ConfigError("plan files are read with --from-json: trainctl plan --from-json FILE... --markdown OUT")
    if from_json and (markdown is None or not files):
        raise ConfigError("usage: trainctl plan --from-json FILE|DIR... --markdown OUT")
    if markdown is not None:  # the user's path, checked before anything is planned or read
        check_output_file("--markdown", markdown, force=force, example="plan.md")


def _exit_on_changes(plans) -> None:
    """Say which stacks change and exit PLAN_CHANGES, else say there are none (exit 0)."""
    if any(p.has_changes for p in plans):
        console.print(f"changes present in {', '.join(p.stack for p in plans if p.has_changes)} (exit {PLAN_CHANGES})")
        raise typer.Exit(PLAN_CHANGES)
    console.print("no changes")


def _render_saved_plans(files: list[Path], markdown: Path, *, artifact: str, expect_env: list[str]) -> None:
    """`plan --from-json`: the review of saved plan JSON files, an env expected but without plans shown failed."""
    from stacks.plan_render import StackPlan, load_plan_files, render_markdown

    plans = load_plan_files(files)
    for missing in sorted(set(expect_env) - {p.env for p in plans}):
        plans.append(
            StackPlan(
                env=missing,
                stack="(all)",
                source="-",
                error=f"no plan was produced for env {missing}: its job stopped before planning (see {artifact})",
            )
        )
    markdown.write_text(render_markdown(plans, artifact=artifact))
    console.print(f"review written to {markdown}")


def apply(
    reviewed: Annotated[
        Path,
        typer.Option(
            help="the reviewed plan JSON as `plan --json-out` wrote it: a FILE.json or a folder of <env>/<stack>.json"
        ),
    ],
    env: EnvOpt = "local",
    sets: SetOpt = None,
    stack: Annotated[str | None, typer.Option(help="only this stack")] = None,
):
    """Apply the env's training stacks only if their fresh plan is exactly the reviewed one.

    Plans every training stack (no preflight: the zone and image are those of the review),
    compares each change with the reviewed plan and applies the saved plans only when all
    match. The foundation is not planned nor applied: it grants IAM and stays an operator's job
    (and the deployer may not read its state).
    """
    from stacks.plan_render.review import PLANFILE, plan_stacks, stale_stacks

    _leave_foundation_to_operator(reviewed, env, stack)
    results, _ = plan_stacks(
        env,
        sets,
        stack,
        None,
        preflight=False,
        lock=True,
        keep_going=False,
        foundation=False,
        show=_show,
        reporter=ConsoleReporter(),
        echo=console.print if STATE["debug"] else None,
    )
    stale = stale_stacks(results, reviewed, env)
    if stale:
        raise TrainstackError(
            "the plan is no longer the reviewed one; nothing applied:\n  " + "\n  ".join(stale),
            hint="review the new plan (a pull request, or the plan workflow on main), then rerun",
        )
    changed = [r for r in results if r.plan.has_changes]
    if changed:
        from stacks.targets import target_of

        config = load(env, sets)[1]
        target_of(config).require_artifacts(config)  # before anything is applied
    for r in changed:
        console.print(f"applying the reviewed plan of {r.plan.stack}")
        console.print(r.tf.apply_saved(r.tf.workdir / PLANFILE), markup=False)
    console.print(f"applied {len(changed)} stack(s): {', '.join(r.plan.stack for r in changed) or 'none had changes'}")


def _leave_foundation_to_operator(reviewed: Path, env: str, stack: str | None) -> None:
    """`apply` refuses the foundation, and notes when the reviewed plan changes it (an operator applies it)."""
    from stacks.naming import FOUNDATION
    from stacks.plan_render import plan_from_document
    from stacks.plan_render.reviewed import reviewed_document

    if stack == FOUNDATION:
        raise ConfigError(
            "the foundation is applied by an operator, not by `trainctl apply`",
            hint=f"TRAINCTL_ENV={env} npx cdktf deploy foundation",
        )
    doc = reviewed_document(reviewed, env, FOUNDATION)
    if doc is not None:
        if plan_from_document(doc, env=env, stack=FOUNDATION, source="review").has_changes:
            console.print(
                f"note: the reviewed plan also changes the foundation; an operator applies it "
                f"(TRAINCTL_ENV={env} npx cdktf deploy foundation)"
            )


def destroy(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None):
    """Stop a language's run (if active) and destroy its training stack."""
    from stacks.runs.teardown import destroy_language

    project, config = load(env, sets)
    done = destroy_language(project, config, lang, ConsoleReporter())
    for run_id in done.stopped_waiting:
        console.print(f"run {run_id}: stopped while it waited for a placement (resumable: --resume {run_id})")
    if done.run_id:
        status = done.status
        console.print(f"run {done.run_id}: {status.state}" + (f" ({status.error})" if status.error else ""))
    console.print(f"{done.stack} destroyed: nothing of it is running")


def gc(
    env: EnvOpt = "local",
    sets: SetOpt = None,
    summary: Annotated[
        Path | None,
        typer.Option(help="append a Markdown list of what was destroyed to FILE (e.g. $GITHUB_STEP_SUMMARY)"),
    ] = None,
):
    """Destroy training stacks whose run has ended (or never started)."""
    from stacks.runs.teardown import collect_ended

    project, config = load(env, sets)
    destroyed, kept = [], []
    for done in collect_ended(project, config, ConsoleReporter()):
        if done.busy:
            console.print(f"{done.busy}; kept", markup=False)
            kept.append(f"`{done.stack}` ({done.busy.split(' is busy: ')[-1]})")
        elif done.state:
            console.print(f"{done.stack}: run {done.run_id} is {done.state}; kept")
            kept.append(f"`{done.stack}` (run `{done.run_id}` is {done.state})")
        elif done.destroyed:
            destroyed.append(f"`{done.stack}` (run `{done.run_id}`)")
    console.print(f"gc: destroyed {len(destroyed)} stack(s)")
    if summary:
        lines = [
            f"### trainctl gc: env `{env}`",
            "",
            f"Destroyed {len(destroyed)} stack(s)" + (":" if destroyed else "."),
        ]
        lines += [f"- {d}" for d in destroyed]
        if kept:
            lines += ["", "Kept (run still active):", *(f"- {k}" for k in kept)]
        with summary.open("a") as out:
            out.write("\n".join(lines) + "\n\n")
