"""One run of one language, start to end: preflight, cost estimate, apply, follow, destroy, cost record.

stacks.runs.orchestrate calls `run_language` for every language of a command (`train`, `lm pretrain`),
each in a worker thread; the command's view renders the LanguageRun it returns.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Callable

from stacks.errors import NoCapacityError, TrainstackError
from stacks.runs import stack_ops
from stacks.runs.failover import RunJournal
from stacks.runs.ladder import keep_rung
from stacks.runs.language_run import (  # noqa: F401 (the phases: where a Ctrl-C finds a language)
    APPLYING,
    DESTROYING,
    DONE,
    FOLLOWING,
    MOVING,
    PREPARING,
    WAITING,
    LanguageRun,
    resolve,
    resume_command,
)
from stacks.runs.moves import follow_moving, placement_record
from stacks.runs.preflight import report_preflight

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig
    from stacks.project import Project


def resume_hint(lang: str, env: str) -> str:
    return (
        f"follow it again: trainctl train {lang} --env {env}   (attaches, then tears down)\n"
        f"  stop it and tear down: trainctl destroy {lang} --env {env}"
    )


def stopped_hint(lang: str, env: str, run_id: str) -> str:
    return f"continue it: {resume_command(lang, env, run_id)}"


def run_language(
    project: "Project",
    config: "EnvConfig",
    lang: str,
    *,
    detach: bool,
    rep,
    echo: Callable | None = None,
    start_lock=None,
    decided=None,
    track: Callable[..., None] = lambda phase, run_id=None: None,
    resume: str | None = None,
) -> LanguageRun:
    """Apply the language's stack, follow its run to the end and destroy the stack (unless `detach`).

    `start_lock`: held from the preflight to the launch, so languages run side by side synthesize
    and apply one at a time (one cdktf app, one synth output) and follow their runs together.
    `decided`: the target's placement decision from `preflight_together` (gcp: the zone).
    `track(phase, run_id)`: told as the run moves on (the phases above), for what a Ctrl-C leaves.
    `resume`: continue this stopped run (its checkpoints) instead of starting a new one.
    -> the run, its status None when the command detached."""
    from stacks.terraform import terraform_binary
    from trainer.runfiles.run_ids import new_run_id
    from trainer.runfiles.status_file import read_status

    run = resolve(project, config, lang)
    terraform_binary()  # no terraform: say so before the data check reads the bucket
    with start_lock or nullcontext():
        # One lock from the data check to the apply: a second trainctl is turned away at once, naming this one's run
        # (a new run's id is chosen now), before it reads the data or rewrites the stack's folder.
        run_id = resume or new_run_id()
        with stack_ops.lock_of(run, f"{'resuming' if resume else 'starting'} run {run_id}", run_id):
            report_preflight(run, rep, resume=resume)
            try:
                stack_ops.open_stack(run, echo=echo, preflight=True, reporter=rep, decided=decided)
            except TrainstackError as refused:
                # The checks are a new run's (its quota counts the active run's own GPUs): a run the stack holds is
                # followed whatever they say.
                if not stack_ops.holds_live_run(run, echo):
                    raise
                rep.info(f"a new run could not start ({refused.message.splitlines()[0]}); the stack holds a live one")
            track(APPLYING)
            attached = stack_ops.launch(run, rep, resume=resume, new_id=run_id)
    journal = RunJournal(run.bucket, lang, run.run_id)
    if not attached:
        journal.placed(placement_record(run.placement, run.settings))
    if attached:  # followed, and moved, from where its last apply put it, not where a new run would go
        run.placement = run.target.placement_of_run(config, lang, run.bucket, run.run_id) or run.placement
        keep_rung(run, journal)
        running = read_status(run.bucket, lang, run.run_id)
        if running is not None and running.job != run.job:
            rep.warn(
                f"run {run.run_id} of {lang} is a {running.job} run, already active: following it to its end "
                f"(one run per language at a time); start this one afterwards"
            )
    track(FOLLOWING, run.run_id)
    if detach:
        rep.info(f"run {run.run_id} started: {run.run_url}")
        rep.info(
            f"follow: trainctl logs {lang} --env {run.env} --follow · status: trainctl status {lang} --env {run.env}"
        )
        return run
    target = run.target
    note = None if attached else target.waiting_note(config, lang, run.placement)
    if note:
        rep.info(note)
    try:
        run.status = follow_moving(run, rep, journal, echo=echo, start_lock=start_lock, track=track)
    except NoCapacityError:
        raise  # stack destroyed, run marked resumable already
    except TrainstackError as exc:
        # The group would keep retrying (and a late VM start billing) unless torn down; a run that has no
        # final word gets one that says how to continue it.
        journal.ended("stopped")
        track(DESTROYING)
        stack_ops.teardown(run, rep)
        stop_resumable(run, exc.message)
        raise
    journal.ended(run.status.state.lower())
    track(DESTROYING)
    stack_ops.teardown(run, rep)
    record_cost(run, rep)
    return run


def stop_resumable(run: LanguageRun, reason: str) -> None:
    """A run stopped by the operator side without a final status (its VMs gone, the stack destroyed): FAILED,
    with how to continue it; a run that already ended keeps its own word."""
    from trainer.runfiles.status_file import mark_failed

    if run.run_id is None:
        return
    try:
        mark_failed(
            run.bucket,
            run.lang,
            run.run_id,
            run.env,
            f"{reason.splitlines()[0]}; stopped, resumable: {resume_command(run.lang, run.env, run.run_id)}",
        )
    except Exception:  # the error being raised is the one to show
        pass


def stop_moving(config: "EnvConfig", lang: str, run_id: str) -> str:
    """Ctrl-C while a run moved (its stack destroyed, waiting, or applied again): no trainctl is left to move it,
    so the run is stopped FAILED with how to continue it (a VM an apply had started sees the final status and
    stops its group), not left PENDING forever. -> that command."""
    from trainer.runfiles.status_file import mark_failed
    from trainer.storage import open_bucket

    command = resume_command(lang, config.env, run_id)
    reason = f"interrupted (Ctrl-C) while the run moved to another placement; stopped, resumable: {command}"
    mark_failed(open_bucket(config.bucket), lang, run_id, config.env, reason)
    return command


def record_cost(run: LanguageRun, rep) -> None:
    """metadata/cost.json: billed VM time (from the VM boot records) and the estimated cost, then report.html."""
    from stacks.runs.records import record_cost as write_cost

    bucket, lang, run_id = run.bucket, run.lang, run.run_id
    try:
        cost = write_cost(bucket, run.config, lang, run_id)
    except Exception as exc:  # bookkeeping must never turn a finished run into an error
        rep.warn(f"could not record the run's cost: {exc}")
    else:
        note = run.target.cost_note(cost)
        if note:
            rep.info(note)
    try:  # the report again, now with the final state (and the cost)
        from trainer.runfiles.report_html import write_report

        write_report(bucket, lang, run_id)
    except Exception as exc:
        rep.warn(f"could not write the run's report.html: {exc}")
