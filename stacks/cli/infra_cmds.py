"""`trainctl synth | plan | destroy | gc`."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stacks.cli.common import EnvOpt, LangArg, SetOpt, STATE, console, load, mapped_errors
from stacks.cli.report import ConsoleReporter
from stacks.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("synth")(synth)
    app.command("plan")(plan)
    app.command("destroy")(destroy)
    app.command("gc")(gc)


@mapped_errors
def synth(env: EnvOpt = "local", sets: SetOpt = None,
          outdir: Annotated[Path, typer.Option(help="output folder")] = Path("cdktf.out")):
    """Synthesize every stack of the environment to cdktf.out/stacks/*."""
    from stacks.app import synth as synth_app

    project, config = load(env, sets)
    target = outdir if outdir.is_absolute() else project.root / outdir
    names = synth_app(config, project, target)
    for name in names:
        console.print(f"{target / 'stacks' / name / 'cdk.tf.json'}")


@mapped_errors
def plan(env: EnvOpt = "local", sets: SetOpt = None,
         stack: Annotated[str | None, typer.Option(help="only this stack, e.g. train-fr or foundation")] = None,
         markdown: Annotated[Path | None, typer.Option(help="also write the plans as Markdown to FILE")] = None,
         preflight: Annotated[bool, typer.Option(help="gcp: quota zone choice and image check before synth "
                                                      "(--no-preflight: first preferred zone, no API calls)")] = True,
         lock: Annotated[bool, typer.Option(help="lock the state while planning (--no-lock for read-only CI)")] = True):
    """Show the Terraform plan of the environment's stacks (after the quota/image preflight on gcp)."""
    from stacks.lifecycle import open_foundation, open_stack
    from stacks.naming import FOUNDATION

    project, config = load(env, sets)
    names = ([FOUNDATION] if config.target == "gcp" else []) + [f"train-{lang}" for lang in config.languages]
    if stack:
        if stack not in names:
            raise ConfigError(f"no stack {stack!r} in env {env!r}; stacks: {', '.join(names)}")
        names = [stack]
    echo = console.print if STATE["debug"] else None
    sections = []
    for name in names:
        if name == FOUNDATION:
            tf = open_foundation(project, config, echo=echo)
        else:
            tf = open_stack(project, config, name.removeprefix("train-"), echo=echo, preflight=preflight,
                            reporter=ConsoleReporter()).tf
        text = tf.plan(lock=lock)
        console.print(f"[bold]{name}[/]\n{text}")
        sections.append(f"### `{name}` ({env})\n\n```\n{text.strip()}\n```\n")
    if markdown:
        markdown.write_text(f"## Terraform plan: env `{env}`\n\n" + "\n".join(sections))


@mapped_errors
def destroy(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None):
    """Stop a language's run (if active) and destroy its training stack."""
    from stacks.lifecycle import active_run, open_stack, teardown, bucket_of
    from trainer.runs import read_status

    project, config = load(env, sets)
    handle = open_stack(project, config, lang)
    run_id = active_run(handle)
    teardown(handle, run_id, ConsoleReporter())
    if run_id:
        status = read_status(bucket_of(config), lang, run_id)
        console.print(f"run {run_id}: {status.state if status else 'no status'}"
                      + (f" ({status.error})" if status and status.error else ""))
    console.print(f"{handle.name} destroyed: nothing of it is running")


@mapped_errors
def gc(env: EnvOpt = "local", sets: SetOpt = None):
    """Destroy training stacks whose run has ended (or never started)."""
    from stacks.lifecycle import active_run, bucket_of, live_state, open_stack, teardown

    project, config = load(env, sets)
    bucket = bucket_of(config)
    cleaned = 0
    for lang in config.languages:
        handle = open_stack(project, config, lang)
        run_id = active_run(handle)
        if not run_id:
            continue
        state = live_state(bucket, lang, run_id, config.target)
        if state is not None:
            console.print(f"{handle.name}: run {run_id} is {state}; kept")
            continue
        teardown(handle, run_id, ConsoleReporter())
        cleaned += 1
    console.print(f"gc: destroyed {cleaned} stack(s)")
