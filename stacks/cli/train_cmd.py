"""`trainctl train`: apply the language's stack, follow the run, tear it down."""
from __future__ import annotations

from typing import Annotated

import typer

from stacks.cli.common import STATE, EnvOpt, LangArg, SetOpt, console, err_console, load, mapped_errors
from rich.markup import escape

from stacks.cli.report import ConsoleReporter, metrics_table, print_table
from stacks.errors import ExitStatus


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def resume_hint(lang: str, env: str) -> str:
    return (f"follow it again: trainctl train {lang} --env {env}   (attaches, then tears down)\n"
            f"  stop it and tear down: trainctl destroy {lang} --env {env}")


@mapped_errors
def train(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None,
          detach: Annotated[bool, typer.Option("--detach", help="return once the stack is applied")] = False):
    """Apply train-LANG, follow the run, destroy the stack, print metrics and artifact URIs."""
    run_job(lang, env, sets, detach, job="classifier")


def run_job(lang: str, env: str, sets, detach: bool, *, job: str) -> None:
    """The run lifecycle (preflight, apply, follow, destroy, report) of a classifier or a base-LM job."""
    from stacks import lifecycle as L
    from trainer.runs import ARTIFACTS, BWD_MODEL, SUCCEEDED, read_metrics, run_prefix

    project, config = load(env, sets)
    L.language_settings(config, lang)  # an unconfigured language is refused, whatever the job
    if job != "classifier":
        project, config = load(env, [*(sets or []), f"languages.{lang}.trainer.job={job}"])
    settings = L.language_settings(config, lang)
    bucket = L.bucket_of(config)
    data = L.preflight_data(bucket, lang, settings) if job == "classifier" else None
    corpus = L.preflight_corpus(bucket, lang, settings) if job != "classifier" else None
    with ConsoleReporter() as rep:
        if data is not None:
            for warning in data.warnings:
                rep.warn(warning)
            rep.info(f"data ok: {len(data.texts)} rows, labels {', '.join(data.label_names)}"
                     + (" (multi-label)" if data.multi_label else ""))
        else:
            rep.info(corpus)
        if config.target == "gcp":  # before anything is created or billed
            from stacks.config.prices import estimate
            from stacks.gcp.pricing import price_book

            book = price_book(config, bucket, [settings.machine_type])
            if book.warning:
                rep.warn(f"prices from the {book.source}: {book.warning}")
            rep.info(estimate(settings, config.region, book).line(settings.machine_type))
        handle = L.open_stack(project, config, lang, echo=console.print if STATE["debug"] else None,
                              preflight=True, reporter=rep)
        try:
            run_id, attached = L.launch(handle, bucket, rep)
        except KeyboardInterrupt:
            err_console.print(f"interrupted while applying {handle.name}; the stack may be partly applied.\n"
                              f"  tear it down: trainctl destroy {lang} --env {env}")
            raise typer.Exit(ExitStatus.INTERRUPTED)
        if attached:
            from trainer.runs import read_status

            running = read_status(bucket, lang, run_id)
            if running is not None and running.job != job:
                rep.warn(f"run {run_id} of {lang} is a {running.job} run, already active: following it to its end "
                         f"(one run per language at a time); start this one afterwards")
        run_url = bucket.url(run_prefix(lang, run_id))
        if detach:
            rep.info(f"run {run_id} started: {run_url}")
            rep.info(f"follow: trainctl logs {lang} --env {env} --follow · status: trainctl status {lang} --env {env}")
            return
        if config.target == "gcp" and not attached:
            from stacks.naming import group_name

            zone = handle.placement.zone if handle.placement else config.zones[0]
            rep.info(f"waiting for the VM (Spot capacity, boot, driver, image pull: usually 3-10 min); "
                     f"watch it: gcloud compute instance-groups managed list-instances "
                     f"{group_name(env, lang)} --zone {zone} --project {config.project}")
        alive = L.local_launcher_alive(project, env, run_id) if config.target == "local" else None
        try:
            status = L.follow(bucket, lang, run_id, rep, launcher_alive=alive,
                              poll_s=1.0 if config.target == "local" else 5.0,
                              appear_timeout_s=L.STATUS_APPEAR_TIMEOUT_S[config.target],
                              give_up_at=L.give_up_time(run_id, settings.max_run_hours))
        except KeyboardInterrupt:
            err_console.print(f"stopped following run {run_id}; it keeps running.\n  {resume_hint(lang, env)}")
            raise typer.Exit(ExitStatus.INTERRUPTED)
        L.teardown(handle, run_id, rep)
        record_cost(bucket, config, lang, run_id, rep)
    if status.state != SUCCEEDED:
        err_console.print(f"[bold red]run {run_id} FAILED[/]: {escape(status.error or '')}", soft_wrap=True)
        err_console.print(f"  log: {bucket.url(run_prefix(lang, run_id) + 'log.txt')}", soft_wrap=True, markup=False)
        raise typer.Exit(ExitStatus.RUN_FAILED)
    metrics = read_metrics(bucket, lang, run_id)
    ran = metrics.get("job", "classifier")
    if ran != job:  # attached to a run of the other kind, started before this command
        err_console.print(f"note: run {run_id} was a {ran} run, already active when this command started; "
                          "nothing of what you asked has run yet: start it again now")
    # By what the run was, not what was asked: `train` may attach to a running `lm pretrain` and back.
    if ran == "pretrain-lm":
        from trainer.lm import store

        lm = metrics["base_lm"]
        small = lm.get("tokens") is not None and lm["tokens"] < store.SMALL_LM_TOKENS
        console.print(f"base LM {lm['id']}: held-out perplexity {lm['perplexity']}"
                      + (f" (backward LM: {lm['backward_perplexity']})" if lm.get("backward") else "")
                      + f", {lm['tokens']:,} training tokens" + (" (small base LM: expect weak transfer)" if small else ""))
        console.print(f"  {bucket.url(store.prefix(lang, lm['id']))} · CURRENT names it: training runs of {lang} "
                      "fine-tune from it", soft_wrap=True, markup=False)
        console.print(f"[green]run {run_id} SUCCEEDED[/]; {handle.name} destroyed, nothing left running")
        return
    print_table(metrics_table(metrics))
    for name in (*ARTIFACTS, *([BWD_MODEL] if metrics.get("bidirectional") else []), "log.txt", "status.json"):
        console.print(f"  {name:22} {bucket.url(run_prefix(lang, run_id) + name)}", soft_wrap=True, markup=False)
    console.print(f"[green]run {run_id} SUCCEEDED[/]; {handle.name} destroyed, nothing left running")


def record_cost(bucket, config, lang: str, run_id: str, rep) -> None:
    """metadata/cost.json: billed VM time (from the VM boot records) and the estimated cost."""
    from stacks.runrecords import record_cost as write_cost

    try:
        cost = write_cost(bucket, config, lang, run_id)
    except Exception as exc:  # bookkeeping must never turn a finished run into an error
        rep.warn(f"could not record the run's cost: {exc}")
        return
    if config.target == "gcp":
        est = "cost unknown" if cost["est_cost"] is None else f"about ${cost['est_cost']:.2f}"
        rep.info(f"VM time {cost['billed_vm_s'] / 3600:.2f}h over {cost['vm_boots']} boot(s): {est}")
