"""One run of one language, start to end: preflight, cost estimate, apply, follow, destroy, cost record.

stacks.runs.orchestrate calls `run_language` for every language of a command (`train`, `lm pretrain`),
each in a worker thread; the command's view renders the RunOutcome.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from stacks.runs import stack_ops, watch
from stacks.runs.preflight import language_settings, report_preflight
from stacks.targets import target_of

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig
    from stacks.project import Project
    from trainer.records.runs import RunStatus
    from trainer.storage import Bucket


# Where a language of a command is (what a Ctrl-C leaves behind: stacks.runs.orchestrate.RunsInterrupted)
WAITING, PREPARING, APPLYING, FOLLOWING, DESTROYING, DONE = (
    "waiting", "preparing", "applying", "following", "destroying", "done")


def resume_hint(lang: str, env: str) -> str:
    return (f"follow it again: trainctl train {lang} --env {env}   (attaches, then tears down)\n"
            f"  stop it and tear down: trainctl destroy {lang} --env {env}")


@dataclass
class RunOutcome:
    """What happened to the run; `status` is None when the command detached after the apply."""

    lang: str
    env: str
    job: str  # what was asked
    run_id: str
    stack: str
    bucket: "Bucket"
    status: "RunStatus | None"

    @property
    def run_url(self) -> str:
        from trainer.records.runs import run_prefix

        return self.bucket.url(run_prefix(self.lang, self.run_id))

    def url(self, name: str) -> str:
        """Where one of the run's files is (a local bucket's URL of a folder has no trailing /)."""
        from trainer.records.runs import run_key

        return self.bucket.url(run_key(self.lang, self.run_id, name))


def run_language(project: "Project", config: "EnvConfig", lang: str, *, job: str, detach: bool, rep,
                 echo: Callable | None = None, start_lock=None, decided=None,
                 track: Callable[..., None] = lambda phase, run_id=None: None) -> RunOutcome:
    """Apply the language's stack, follow its run to the end and destroy the stack (unless `detach`).

    `start_lock`: held from the preflight to the launch, so languages run side by side synthesize
    and apply one at a time (one cdktf app, one synth output) and follow their runs together.
    `decided`: the target's placement decision from `preflight_together` (gcp: the zone).
    `track(phase, run_id)`: told as the run moves on (the phases above), for what a Ctrl-C leaves."""
    from trainer.records.runs import read_status
    from trainer.storage import open_bucket

    env, settings, bucket = config.env, language_settings(config, lang), open_bucket(config.bucket)
    with start_lock or nullcontext():
        report_preflight(config, lang, job, bucket, rep)
        handle = stack_ops.open_stack(project, config, lang, echo=echo, preflight=True, reporter=rep, decided=decided)
        track(APPLYING)
        run_id, attached = stack_ops.launch(handle, bucket, rep)
    if attached:
        running = read_status(bucket, lang, run_id)
        if running is not None and running.job != job:
            rep.warn(f"run {run_id} of {lang} is a {running.job} run, already active: following it to its end "
                     f"(one run per language at a time); start this one afterwards")
    outcome = RunOutcome(lang, env, job, run_id, handle.name, bucket, None)
    track(FOLLOWING, run_id)
    if detach:
        rep.info(f"run {run_id} started: {outcome.run_url}")
        rep.info(f"follow: trainctl logs {lang} --env {env} --follow · status: trainctl status {lang} --env {env}")
        return outcome
    target = target_of(config)
    note = None if attached else target.waiting_note(config, lang, handle.placement)
    if note:
        rep.info(note)
    alive = target.launcher_alive(project, env, run_id)
    outcome.status = watch.follow(bucket, lang, run_id, rep, launcher_alive=alive,
                              poll_s=target.poll_s, appear_timeout_s=target.status_appear_timeout_s,
                              give_up_at=watch.give_up_time(run_id, settings.max_run_hours))
    track(DESTROYING)
    stack_ops.teardown(handle, run_id, rep)
    record_cost(bucket, config, lang, run_id, rep)
    return outcome


def record_cost(bucket: "Bucket", config: "EnvConfig", lang: str, run_id: str, rep) -> None:
    """metadata/cost.json: billed VM time (from the VM boot records) and the estimated cost."""
    from stacks.runs.records import record_cost as write_cost

    try:
        cost = write_cost(bucket, config, lang, run_id)
    except Exception as exc:  # bookkeeping must never turn a finished run into an error
        rep.warn(f"could not record the run's cost: {exc}")
    else:
        note = target_of(config).cost_note(cost)
        if note:
            rep.info(note)
    try:  # the report again, now with the final state (and the cost)
        from trainer.records.run_report import write_report

        write_report(bucket, lang, run_id)
    except Exception as exc:
        rep.warn(f"could not write the run's report.html: {exc}")
