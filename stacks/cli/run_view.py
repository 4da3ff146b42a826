"""Running languages' jobs from a command (`train`, `lm pretrain`): stacks.runs.orchestrate does the work for
one language or many; this picks the view by how many there are and renders the end.

One language: its log lines as they come (a progress bar on a terminal), then its metrics, the LM it published
or its failure. Several: the live table of stacks/cli/multi_view.py, then one summary row per language.
"""

from __future__ import annotations

import typer
from rich.markup import escape

from stacks.cli.common import STATE, console, described, emit_json, err_console, json_on_stdout, load, print_error
from stacks.cli.run_console import ConsoleReporter, metrics_table, print_table
from stacks.errors import ExitStatus
from trainer.params import Job


def run_command(
    langs: list[str] | None,
    env: str,
    sets,
    detach: bool,
    *,
    job: str,
    parallel: int | None = None,
    promote: bool = False,
    resume: dict[str, str] | None = None,
    as_json: bool = False,
) -> None:
    """Run the languages' jobs (None: every language of the env), render them, exit with the command's
    status (0: every language succeeded). `as_json`: the end as one JSON document on stdout (runs_document),
    everything else on stderr."""
    from stacks.runs.orchestrate import exit_status

    project, config = load(env, sets)
    langs = langs or sorted(config.languages)
    with json_on_stdout(as_json):
        results = _run(
            project, config, langs, env, sets, detach, job=job, parallel=parallel, promote=promote, resume=resume
        )
    if as_json:
        emit_json(runs_document(results, config))
    if STATE["debug"]:
        err_console.print(f"exit status: {exit_status(results)}")
    raise typer.Exit(exit_status(results))


def _run(project, config, langs: list[str], env: str, sets, detach: bool, **how) -> list:
    """The languages' runs followed in one view, its summary, then what their mirror in the tracker did (each
    run is mirrored as it ends; a tracker that fails costs one line)."""
    from stacks.cli.multi_view import TableView
    from stacks.runs.orchestrate import RunsInterrupted, run_languages
    from stacks.tracking.after_run import RunEndMirror

    mirror = RunEndMirror(config, langs)
    view = StreamView() if len(langs) == 1 else TableView(langs)
    with view:
        try:
            results = run_languages(
                project,
                config,
                langs,
                detach=detach,
                view=view,
                sets=list(sets or []),
                describe_error=described,
                on_ended=mirror.run_ended,
                **how,
            )
        except RunsInterrupted as stop:
            from stacks.targets import target_of

            view.interrupted(stop, env, outlives=target_of(config).runs_outlive_command(config))
            _say(mirror, config)  # the runs that ended before it
            raise typer.Exit(ExitStatus.INTERRUPTED) from None
    view.summary(results, config)
    _say(mirror, config)
    return results


def _say(mirror, config) -> None:
    from stacks.cli.mirror_view import say_mirrored

    mirrored = mirror.result()
    if mirrored is not None:
        say_mirrored(config, mirrored)


def runs_document(results, config) -> dict:
    """`train --json`: each language's run as `runs --json` has it, with how its part of the command ended."""
    from stacks.runs.orchestrate import exit_status
    from stacks.runs.records import run_row

    runs = []
    for r in results:
        started = r.outcome is not None and r.outcome.run_id is not None
        row = run_row(r.outcome.bucket, config, r.lang, r.outcome.run_id) if started else {}
        runs.append(
            {
                "lang": r.lang,
                "run_id": row.get("run_id"),
                "state": row.get("state") or "ERROR",
                "exit_status": int(r.exit_status),
                **{k: row.get(k) for k in ("macro_f1", "tfidf_macro_f1", "kept", "url")},
                "error": row.get("error") or r.message,
                "hint": r.hint,
                "promotion": r.promotion,
            }
        )
    return {"env": config.env, "exit_status": int(exit_status(results)), "runs": runs}


class StreamView(ConsoleReporter):
    """One language's run as a stream of lines; the end as `render` prints it."""

    def __init__(self):
        super().__init__()
        self.echo = console.print if STATE["debug"] else None  # Terraform's own output

    def reporter(self, lang: str) -> "StreamView":
        return self

    def finished(self, result) -> None:
        """The end is rendered by `summary`, once the bar is gone."""

    def interrupted(self, stop, env: str, *, outlives: bool = True) -> None:
        """What a Ctrl-C left; `outlives`: the run goes on without this command (else it stopped with it)."""
        from stacks.runs.runflow import APPLYING, DESTROYING, FOLLOWING, MOVING, resume_hint, stopped_hint

        [(lang, (phase, run_id))] = stop.where.items()
        if phase == FOLLOWING and outlives:
            print_error(f"stopped following run {run_id}; it keeps running", resume_hint(lang, env))
        elif phase == FOLLOWING:
            print_error(
                f"stopped following run {run_id}; it stopped with this command, resumable (checkpoints kept)",
                stopped_hint(lang, env, run_id),
            )
        elif phase == MOVING:
            print_error(
                f"interrupted while run {run_id} moved to another placement: stopped, resumable (checkpoints kept)",
                stopped_hint(lang, env, run_id),
            )
        elif phase in (APPLYING, DESTROYING) and not outlives:  # nothing of it is left to tear down
            print_error(
                f"interrupted while {phase} train-{lang}; nothing of it outlives this command",
                stopped_hint(lang, env, run_id) if run_id else f"start it again: trainctl train {lang} --env {env}",
            )
        elif phase in (APPLYING, DESTROYING):
            print_error(
                f"interrupted while {phase} train-{lang}; the stack may be partly "
                + ("applied" if phase == APPLYING else "destroyed"),
                f"tear it down: trainctl destroy {lang} --env {env}",
            )
        else:
            err_console.print("interrupted: nothing was applied")

    def summary(self, results, config) -> None:
        [result] = results
        if result.outcome is not None and result.outcome.status is not None:
            render(result.outcome)
        elif result.message:
            print_error(result.message, result.hint)
        if result.promotion:
            console.print(result.promotion, soft_wrap=True, markup=False)


def render(outcome) -> None:
    """The end of a followed run: its failure, the base LM it published, or its metrics and artifacts."""
    from trainer.runfiles.keys import ARTIFACTS, BWD_MODEL
    from trainer.runfiles.readers import read_metrics
    from trainer.runfiles.status_file import SUCCEEDED

    lang, run_id, bucket, status = outcome.lang, outcome.run_id, outcome.bucket, outcome.status
    if status.state != SUCCEEDED:
        err_console.print(f"[bold red]run {run_id} FAILED[/]: {escape(status.error or '')}", soft_wrap=True)
        err_console.print(f"  log: {outcome.url('log.txt')}", soft_wrap=True, markup=False)
        return
    metrics = read_metrics(bucket, lang, run_id)
    ran = metrics.job
    if ran != outcome.job:  # attached to a run of the other kind, started before this command
        err_console.print(
            f"note: run {run_id} was a {ran} run, already active when this command started; "
            "nothing of what you asked has run yet: start it again now"
        )
    # By what the run was, not what was asked: `train` may attach to a running `lm pretrain` and back.
    if ran == Job.PRETRAIN_LM:
        from trainer.lm import store

        lm = metrics.base_lm
        small = lm.get("tokens") is not None and lm["tokens"] < store.SMALL_LM_TOKENS
        console.print(
            f"base LM {lm['id']}: held-out perplexity {lm['perplexity']}"
            + (f" (backward LM: {lm['backward_perplexity']})" if lm.get("backward") else "")
            + f", {lm['tokens']:,} training tokens"
            + (" (small base LM: expect weak transfer)" if small else "")
        )
        console.print(
            f"  {bucket.url(store.prefix(lang, lm['id']))} · CURRENT names it: training runs of {lang} "
            "fine-tune from it",
            soft_wrap=True,
            markup=False,
        )
    else:
        print_table(metrics_table(metrics))
        for name in (*ARTIFACTS, *([BWD_MODEL] if metrics.bidirectional else []), "log.txt", "status.json"):
            console.print(f"  {name:22} {outcome.url(name)}", soft_wrap=True, markup=False)
    console.print(f"[green]run {run_id} SUCCEEDED[/]; {outcome.stack} destroyed, nothing left running")
