"""One run of one language, start to end: preflight, cost estimate, apply, follow, destroy, cost record.

stacks.runs.orchestrate calls `run_language` for every language of a command (`train`, `lm pretrain`),
each in a worker thread; the command's view renders the LanguageRun it returns.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Callable

from stacks.errors import VmCreationError
from stacks.runs import stack_ops, watch
from stacks.runs.language_run import LanguageRun, resolve
from stacks.runs.preflight import report_preflight
from stacks.targets import target_of

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig
    from stacks.project import Project


# Where a language of a command is (what a Ctrl-C leaves behind: stacks.runs.orchestrate.RunsInterrupted)
WAITING, PREPARING, APPLYING, FOLLOWING, DESTROYING, DONE = (
    "waiting", "preparing", "applying", "following", "destroying", "done")


def resume_hint(lang: str, env: str) -> str:
    return (f"follow it again: trainctl train {lang} --env {env}   (attaches, then tears down)\n"
            f"  stop it and tear down: trainctl destroy {lang} --env {env}")


def run_language(project: "Project", config: "EnvConfig", lang: str, *, detach: bool, rep,
                 echo: Callable | None = None, start_lock=None, decided=None,
                 track: Callable[..., None] = lambda phase, run_id=None: None) -> LanguageRun:
    """Apply the language's stack, follow its run to the end and destroy the stack (unless `detach`).

    `start_lock`: held from the preflight to the launch, so languages run side by side synthesize
    and apply one at a time (one cdktf app, one synth output) and follow their runs together.
    `decided`: the target's placement decision from `preflight_together` (gcp: the zone).
    `track(phase, run_id)`: told as the run moves on (the phases above), for what a Ctrl-C leaves.
    -> the run, its status None when the command detached."""
    from stacks.terraform import terraform_binary
    from trainer.runfiles.status_file import read_status

    run = resolve(project, config, lang)
    terraform_binary()  # no terraform: say so before the data check reads the bucket
    with start_lock or nullcontext():
        report_preflight(run, rep)
        stack_ops.open_stack(run, echo=echo, preflight=True, reporter=rep, decided=decided)
        track(APPLYING)
        attached = stack_ops.launch(run, rep)
    if attached:
        running = read_status(run.bucket, lang, run.run_id)
        if running is not None and running.job != run.job:
            rep.warn(f"run {run.run_id} of {lang} is a {running.job} run, already active: following it to its end "
                     f"(one run per language at a time); start this one afterwards")
    track(FOLLOWING, run.run_id)
    if detach:
        rep.info(f"run {run.run_id} started: {run.run_url}")
        rep.info(f"follow: trainctl logs {lang} --env {run.env} --follow · "
                 f"status: trainctl status {lang} --env {run.env}")
        return run
    target = target_of(config)
    note = None if attached else target.waiting_note(config, lang, run.placement)
    if note:
        rep.info(note)
    alive = target.launcher_alive(project, run.env, run.run_id)
    try:
        run.status = watch.follow(
            run.bucket, lang, run.run_id, rep, launcher_alive=alive, poll_s=target.poll_s,
            appear_timeout_s=target.status_appear_timeout_s,
            give_up_at=watch.give_up_time(run.run_id, run.settings.max_run_hours),
            creation_errors=target.creation_errors(config, lang, rep, placement=run.placement),
            creation_error_limit_s=run.settings.creation_error_minutes * 60)
    except VmCreationError:
        # Nothing ran: the group would keep retrying (and a late VM start billing) unless torn down.
        track(DESTROYING)
        stack_ops.teardown(run, rep)
        raise
    track(DESTROYING)
    stack_ops.teardown(run, rep)
    record_cost(run, rep)
    return run


def record_cost(run: LanguageRun, rep) -> None:
    """metadata/cost.json: billed VM time (from the VM boot records) and the estimated cost, then report.html."""
    from stacks.runs.records import record_cost as write_cost

    bucket, lang, run_id = run.bucket, run.lang, run.run_id
    try:
        cost = write_cost(bucket, run.config, lang, run_id)
    except Exception as exc:  # bookkeeping must never turn a finished run into an error
        rep.warn(f"could not record the run's cost: {exc}")
    else:
        note = target_of(run.config).cost_note(cost)
        if note:
            rep.info(note)
    try:  # the report again, now with the final state (and the cost)
        from trainer.runfiles.report_html import write_report

        write_report(bucket, lang, run_id)
    except Exception as exc:
        rep.warn(f"could not write the run's report.html: {exc}")
