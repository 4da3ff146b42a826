"""Running one language's job from a command (`train`, `lm pretrain`): stacks.runs.runflow does the work,
this renders its outcome."""
from __future__ import annotations

import typer
from rich.markup import escape

from stacks.cli.common import STATE, console, err_console, load
from stacks.cli.report import ConsoleReporter, metrics_table, print_table
from stacks.errors import ExitStatus


def run_job(lang: str, env: str, sets, detach: bool, *, job: str, promote_if_better: bool = False) -> None:
    from stacks.runs.runflow import run_language, with_job

    project, config = load(env, sets)
    config = with_job(project, config, env, sets, lang, job)
    with ConsoleReporter() as rep:
        outcome = run_language(project, config, lang, job=job, detach=detach, rep=rep,
                               echo=console.print if STATE["debug"] else None)
    if outcome.status is not None:
        render(outcome)
        if promote_if_better:
            from stacks.runs.promotion import promote_if_better

            console.print(promote_if_better(outcome.bucket, lang, outcome.run_id), soft_wrap=True, markup=False)


def render(outcome) -> None:
    """The end of a followed run: its failure, the base LM it published, or its metrics and artifacts."""
    from trainer.records.runs import ARTIFACTS, BWD_MODEL, SUCCEEDED, read_metrics

    lang, run_id, bucket, status = outcome.lang, outcome.run_id, outcome.bucket, outcome.status
    if status.state != SUCCEEDED:
        err_console.print(f"[bold red]run {run_id} FAILED[/]: {escape(status.error or '')}", soft_wrap=True)
        err_console.print(f"  log: {outcome.url('log.txt')}", soft_wrap=True, markup=False)
        raise typer.Exit(ExitStatus.RUN_FAILED)
    metrics = read_metrics(bucket, lang, run_id)
    ran = metrics.job
    if ran != outcome.job:  # attached to a run of the other kind, started before this command
        err_console.print(f"note: run {run_id} was a {ran} run, already active when this command started; "
                          "nothing of what you asked has run yet: start it again now")
    # By what the run was, not what was asked: `train` may attach to a running `lm pretrain` and back.
    if ran == "pretrain-lm":
        from trainer.lm import store

        lm = metrics.base_lm
        small = lm.get("tokens") is not None and lm["tokens"] < store.SMALL_LM_TOKENS
        console.print(f"base LM {lm['id']}: held-out perplexity {lm['perplexity']}"
                      + (f" (backward LM: {lm['backward_perplexity']})" if lm.get("backward") else "")
                      + f", {lm['tokens']:,} training tokens" + (" (small base LM: expect weak transfer)" if small else ""))
        console.print(f"  {bucket.url(store.prefix(lang, lm['id']))} · CURRENT names it: training runs of {lang} "
                      "fine-tune from it", soft_wrap=True, markup=False)
    else:
        print_table(metrics_table(metrics))
        for name in (*ARTIFACTS, *([BWD_MODEL] if metrics.bidirectional else []), "log.txt", "status.json"):
            console.print(f"  {name:22} {outcome.url(name)}", soft_wrap=True, markup=False)
    console.print(f"[green]run {run_id} SUCCEEDED[/]; {outcome.stack} destroyed, nothing left running")
