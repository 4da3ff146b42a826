"""One run of one language, start to end: preflight, cost estimate, apply, follow, destroy, cost record.

stacks.runs.orchestrate calls `run_language` for every language of a command (`train`, `lm pretrain`),
each in a worker thread; the command's view renders the LanguageRun it returns.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Callable

from stacks.errors import NoCapacityError, TrainstackError, VmCreationError
from stacks.runs import stack_ops, watch
from stacks.runs.failover import Failover, RunJournal
from stacks.runs.ladder import keep_rung, queue_wait_s, take_next_rung
from stacks.runs.language_run import LanguageRun, resolve, resume_command
from stacks.runs.preflight import report_preflight
from stacks.runs.zone_ranking import block_note, rank_zones, ranked_placements

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig
    from stacks.project import Project


# Where a language of a command is (what a Ctrl-C leaves behind: stacks.runs.orchestrate.RunsInterrupted).
# MOVING: the run's stack is being destroyed, waits for capacity or is applied at another placement; a Ctrl-C
# there stops the run, resumable (stop_moving).
WAITING, PREPARING, APPLYING, FOLLOWING, MOVING, DESTROYING, DONE = (
    "waiting",
    "preparing",
    "applying",
    "following",
    "moving",
    "destroying",
    "done",
)


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


def placement_record(placement, settings) -> dict:
    """What metadata/placements.json says of a placement: its zone, its region where the target's placement has one
    (a zone's name alone does not say it on every cloud), the rung of the capacity ladder it asked for, and how long
    a queue may hold it (`queue_s`: a run queued for a flex-start VM is still going, whoever asks)."""
    zone, region = getattr(placement, "zone", None), getattr(placement, "region", None)
    queue = queue_wait_s(settings)
    return {
        "zone": zone,
        **({"region": region} if region else {}),
        "spot": settings.spot,
        "rung": settings.rung,
        **({"queue_s": queue} if queue else {}),
    }


def follow_moving(
    run: LanguageRun,
    rep,
    journal: RunJournal,
    *,
    echo=None,
    start_lock=None,
    track: Callable[..., None] = lambda phase, run_id=None: None,
):
    """Follow the run to its final status, moving it to the next placement whenever its group can create no
    VM for lack of capacity or quota (stacks.runs.failover); every move and preemption in `journal`."""
    target = run.target
    # The candidates (gcp: a quota look-up per zone) are only asked for once the run has to move.
    failover = Failover(
        [],
        run.settings.capacity_wait_minutes * 60,
        target.capacity_retry_s(run.config),
        describe=target.describe_placement,
        sleep=lambda seconds: pause_unless_stopped(run, seconds),
        blocked=lambda placement: zone_block(run, journal, placement),
    )
    failover.pass_done = lambda: take_next_rung(run, rep, failover)
    seen = status_observer(run, rep, journal, failover)
    tail = watch.LogTail(run.bucket, run.lang, run.run_id)
    while True:
        try:
            return follow_in_place(run, rep, on_status=seen, tail=tail)
        except VmCreationError as exc:
            if not exc.movable:
                raise
            journal.ended("no capacity" if "capacity" in exc.kinds else "no quota")
            where = target.describe_placement(run.placement)
            rep.warn(f"no VM for run {run.run_id} in {where} for {exc.minutes:g} min ({exc.last}): moving it")
            track(MOVING)
            stack_ops.teardown(run, rep)  # nothing billed while it waits or moves
            stack_ops.after_move_teardown(run)
            if not failover.candidates:
                listed = target.placements(run.config, run.lang, rep, first=run.placement)
                ranking = rank_zones(target, run.config, run.lang, run.bucket, journal=journal.data)
                failover.candidates[:], failover.index = ranked_placements(listed, ranking, run.placement)
            placement = reapply_at_next(run, rep, journal, failover, exc, echo=echo, start_lock=start_lock, track=track)
            journal.placed(placement_record(placement, run.settings))
            rep.info(
                f"run {run.run_id} moved to {target.describe_placement(placement)}: it resumes from its last checkpoint"
            )
            track(FOLLOWING, run.run_id)


def zone_block(run: LanguageRun, journal: RunJournal, placement) -> str | None:
    """Why `placement` may not take the run now: its zone preempted this Spot run within zone_block_minutes."""
    if not run.settings.spot:
        return None  # an on-demand VM is not preempted: the zone is as good as any
    return block_note(journal.data, run.settings.zone_block_minutes, getattr(placement, "zone", None))


def follow_in_place(run: LanguageRun, rep, *, on_status: Callable, tail: watch.LogTail):
    """watch.follow where the run is now, with its settings now (a later rung of the ladder may have replaced them).
    A flex_start request is queued, not failing: it may wait flex_start_wait_minutes before the run moves on."""
    target, lang, config, settings = run.target, run.lang, run.config, run.settings
    return watch.follow(
        run.bucket,
        lang,
        run.run_id,
        rep,
        launcher_alive=target.launcher_alive(run.project, run.env, run.run_id),
        poll_s=target.poll_s,
        appear_timeout_s=target.status_appear_timeout_s + queue_wait_s(settings),
        give_up_at=watch.give_up_time(run.run_id, settings.max_run_hours),
        creation_errors=target.creation_errors(
            config, lang, rep, placement=run.placement, project=run.project, run_id=run.run_id
        ),
        creation_error_limit_s=(
            settings.flex_start_wait_minutes if settings.rung == "flex_start" else settings.creation_error_minutes
        )
        * 60,
        vm_running=lambda: target.vm_running(run.project, run.config, lang, run.run_id, run.placement),
        on_status=on_status,
        tail=tail,
    )


def status_observer(run: LanguageRun, rep, journal: RunJournal, failover: Failover) -> Callable:
    """What to tell of every status read: a preemption, and the run training again (the wait for a VM ends)."""
    target = run.target

    def seen(status) -> None:
        event = journal.observe(status)
        if event == "preempted":
            rep.warn(
                f"run {run.run_id} was interrupted in {target.describe_placement(run.placement)} (preempted, or "
                f"its machine lost): waiting for its group to create a VM again; it resumes from its checkpoint"
            )
        elif event in ("started", "training"):
            if failover.waited_s():
                journal.waited(failover.waited_s())
            failover.vm_came()
            if event == "training":
                rep.info(f"run {run.run_id} is training again in {target.describe_placement(run.placement)}")

    return seen


def reapply_at_next(
    run: LanguageRun,
    rep,
    journal: RunJournal,
    failover: Failover,
    exc: VmCreationError,
    *,
    echo,
    start_lock,
    track: Callable[..., None],
):
    """The run's stack applied at the next placement that takes it -> that placement; none left for
    capacity_wait_minutes: give_up (NoCapacityError)."""
    target = run.target
    failed_for_s, rules_out = exc.minutes * 60, exc.rules_out
    while True:
        placement = failover.next_placement(failed_for_s, rep.info, rules_out)
        rules_out = ()
        if placement is None:
            give_up(run, rep, journal, failover, len(failover.candidates), exc.hint)
        track(MOVING)
        try:
            with start_lock or nullcontext():
                stack_ops.reapply(run, placement, rep, echo=echo)
        except (stack_ops.RunActiveError, stack_ops.RunStoppedError):
            raise  # another run took the stack meanwhile, or the run was stopped: never applied
        except TrainstackError as apply_error:  # the plan's quota guard, an apply error: the next one
            rep.warn(
                f"could not apply {run.stack} at {target.describe_placement(placement)}: "
                f"{apply_error.message.splitlines()[0]}; trying the next placement"
            )
            journal.placed(placement_record(placement, run.settings))
            journal.ended("apply failed")
            stack_ops.teardown(run, rep)
            failed_for_s = 0.0
            continue
        return placement


STOPPED_POLL_S = 5.0  # a pause between passes looks this often whether another command stopped the run


def pause_unless_stopped(run: LanguageRun, seconds: float) -> None:
    """The pause between passes over the placements, cut short once another command (`trainctl destroy`) has
    stopped the run: the next apply then refuses it (stack_ops.RunStoppedError) at once."""
    import time

    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, STOPPED_POLL_S))
        if stack_ops.stopped_elsewhere(run):
            return


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


def give_up(run: LanguageRun, rep, journal: RunJournal, failover: Failover, tried: int, advice: str):
    """Every placement lacked capacity for capacity_wait_minutes: the stack is already destroyed; the run is
    marked FAILED, resumable; NoCapacityError (exit 3)."""
    from trainer.runfiles.status_file import mark_failed

    waited = failover.waited_s()
    journal.waited(waited)
    hint = (
        f"resume it when capacity is back: {resume_command(run.lang, run.env, run.run_id)} "
        f"(its checkpoints are kept; nothing is running or billed)"
    )
    message = (
        f"no capacity for run {run.run_id} in any of {tried} placement(s) for {waited / 60:.1f} min "
        f"(capacity_wait_minutes={run.settings.capacity_wait_minutes:g}): stopped"
    )
    mark_failed(run.bucket, run.lang, run.run_id, run.env, f"{message}; {hint}")
    run.status = None
    raise NoCapacityError(message, hint=f"{hint}\n  or: {advice}")


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
