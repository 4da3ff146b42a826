"""A run followed where it is, and moved when it must: its group creates no VM for lack of capacity or quota
(stacks.runs.failover), or its Spot zone preempted it and another placement may take it now (the zone is blocked
for the run for zone_block_minutes: waiting there for the group to create a VM again would put it back in the
zone most likely to preempt it again). Every move and preemption goes in the run's journal (placements.json).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

from stacks.errors import NoCapacityError, TrainstackError, VmCreationError
from stacks.runs import stack_ops, watch
from stacks.runs.failover import Failover, RunJournal, counts_as_preemption
from stacks.runs.ladder import queue_wait_s, take_next_rung
from stacks.runs.language_run import FOLLOWING, MOVING, LanguageRun, resume_command
from stacks.runs.zone_ranking import block_note, rank_zones, ranked_placements


class PreemptedHere(Exception):
    """Out of the watch: the run's zone preempted it and another placement is open, so it moves now."""

    def __init__(self, block: str):
        super().__init__(block)
        self.block = block


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
    VM for lack of capacity or quota, or its zone preempted it (`leave_after_preemption`)."""
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
    seen = status_observer(run, rep, journal, failover, track)
    tail = watch.LogTail(run.bucket, run.lang, run.run_id)
    while True:
        where = target.describe_placement(run.placement)
        try:
            return follow_in_place(run, rep, on_status=seen, tail=tail)
        except VmCreationError as exc:
            if not exc.movable:
                raise
            journal.ended("no capacity" if "capacity" in exc.kinds else "no quota")
            rep.warn(f"no VM for run {run.run_id} in {where} for {exc.minutes:g} min ({exc.last}): moving it")
            failed_for_s, rules_out, hint = exc.minutes * 60, exc.rules_out, exc.hint
        except PreemptedHere as left:
            journal.ended("preempted")
            rep.warn(f"run {run.run_id} leaves {where} at once: {left.block} (zone_block_minutes: 0 waits there)")
            failed_for_s, rules_out, hint = 0.0, (), WIDER_SEARCH
        track(MOVING)
        stack_ops.teardown(run, rep)  # nothing billed while it waits or moves
        stack_ops.after_move_teardown(run)
        draw_candidates(run, rep, journal, failover)
        placement = reapply_at_next(
            run, rep, journal, failover, failed_for_s, rules_out, hint, echo=echo, start_lock=start_lock, track=track
        )
        journal.placed(placement_record(placement, run.settings))
        rep.info(
            f"run {run.run_id} moved to {target.describe_placement(placement)}: it resumes from its last checkpoint"
        )
        track(FOLLOWING, run.run_id)


WIDER_SEARCH = (
    "give it more room: more zones (zones, fallback_zones in the env's overlay), a longer capacity_wait_minutes, a "
    "later rung (capacity: [spot, flex_start, on_demand]), or zone_block_minutes: 0 to let it wait where it was "
    "preempted"
)


def draw_candidates(run: LanguageRun, rep, journal: RunJournal, failover: Failover, *, freed: bool = False) -> None:
    """The placements a move may take, ranked (stacks.runs.zone_ranking), the current one first; drawn once.
    `freed`: the run's own GPUs count as free (its preempted VM holds them while it stops)."""
    if failover.candidates:
        return
    target = run.target
    listed = target.placements(run.config, run.lang, rep, first=run.placement, freed=freed)
    ranking = rank_zones(target, run.config, run.lang, run.bucket, journal=journal.data)
    failover.candidates[:], failover.index = ranked_placements(listed, ranking, run.placement)


def leave_after_preemption(run: LanguageRun, rep, journal: RunJournal, failover: Failover, track) -> str | None:
    """Why the run leaves its placement now that its zone preempted it (blocked for it: zone_block_minutes), else
    None: it waits there for its group to create a VM again (no block: zone_block_minutes 0, a rung that is not
    preempted, or an interruption that was not a preemption, such as a crashed peer; or no other placement open in
    the region: a preemption never sends a run where egress is billed)."""
    here = getattr(run.placement, "zone", None)
    last = journal.data["preemptions"][-1] if journal.data["preemptions"] else None
    if last is None or last.get("zone") != here or not counts_as_preemption(last):
        return None
    block = zone_block(run, journal, run.placement)
    if not block:
        return None
    track(MOVING)  # from here a Ctrl-C stops the run resumable rather than leaving a preempted group behind
    try:
        draw_candidates(run, rep, journal, failover, freed=True)
    except Exception as exc:  # the quota look-up failed: the group in place is still a way back to training
        rep.warn(f"could not list the placements to move run {run.run_id} to ({exc}): it waits where it is")
        track(FOLLOWING, run.run_id)
        return None
    region = getattr(run.placement, "region", None)
    open_ = [
        p
        for p in failover.candidates
        if getattr(p, "zone", None) != here and getattr(p, "region", None) == region and not zone_block(run, journal, p)
    ]
    if not open_:
        rep.info(
            f"{run.target.describe_placement(run.placement)} is blocked for run {run.run_id} ({block}), but no other "
            "placement in its region is open (none listed, or every one blocked): it waits there for its group to "
            "create a VM again"
        )
        track(FOLLOWING, run.run_id)
        return None
    return block


def zone_block(run: LanguageRun, journal: RunJournal, placement) -> str | None:
    """Why `placement` may not take the run now: its zone preempted this Spot run within zone_block_minutes."""
    if not run.settings.spot:
        return None  # an on-demand VM is not preempted: the zone is as good as any
    return block_note(journal.data, run.settings.zone_block_minutes, getattr(placement, "zone", None))


def follow_in_place(run: LanguageRun, rep, *, on_status: Callable, tail: watch.LogTail):
    """watch.follow where the run is now, with its settings now (a later rung of the ladder may have replaced them).
    A flex_start request queued (not failing) may wait flex_start_wait_minutes before the run moves on; an error at
    that rung (a quota, a failed request) moves it after creation_error_minutes, as at any rung."""
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
        creation_error_limit_s=settings.creation_error_minutes * 60,
        queued_limit_s=settings.flex_start_wait_minutes * 60 if settings.rung == "flex_start" else None,
        vm_running=lambda: target.vm_running(run.project, run.config, lang, run.run_id, run.placement),
        on_status=on_status,
        tail=tail,
    )


def status_observer(run: LanguageRun, rep, journal: RunJournal, failover: Failover, track) -> Callable:
    """What to tell of every status read: a preemption (the run leaves the zone, or waits there for its group), and
    the run training again (the wait for a VM ends). A follower that attaches to a run its zone just preempted (the
    journal holds the preemption, still open) decides at its first read as the first follower would have."""
    target = run.target
    first = [True]

    def seen(status) -> None:
        attached_to_preempted = first[0] and _open_preemption_here(run, journal, status)
        first[0] = False
        event = journal.observe(status)
        if event == "preempted" or attached_to_preempted:
            where = target.describe_placement(run.placement)
            leave = leave_after_preemption(run, rep, journal, failover, track)
            if leave:
                rep.warn(f"run {run.run_id} was interrupted in {where} (preempted, or its machine lost)")
                raise PreemptedHere(leave)
            if event == "preempted":
                rep.warn(
                    f"run {run.run_id} was interrupted in {where} (preempted, or its machine lost): waiting for its "
                    f"group to create a VM again; it resumes from its checkpoint"
                )
        elif event in ("started", "training"):
            if failover.waited_s():
                journal.waited(failover.waited_s())
            failover.vm_came()
            if event == "training":
                rep.info(f"run {run.run_id} is training again in {target.describe_placement(run.placement)}")

    return seen


def _open_preemption_here(run: LanguageRun, journal: RunJournal, status) -> bool:
    """The run is interrupted and its journal's last interruption, still open, was in its current zone."""
    from trainer.runfiles.status_file import INTERRUPTED_STAGE

    if status is None or status.terminal or status.stage != INTERRUPTED_STAGE:
        return False
    last = journal.open_preemption()
    return last is not None and last.get("zone") == getattr(run.placement, "zone", None)


def reapply_at_next(
    run: LanguageRun,
    rep,
    journal: RunJournal,
    failover: Failover,
    failed_for_s: float,
    rules_out: tuple,
    hint: str,
    *,
    echo,
    start_lock,
    track: Callable[..., None],
):
    """The run's stack applied at the next placement that takes it -> that placement; none left for
    capacity_wait_minutes: give_up (NoCapacityError)."""
    target = run.target
    while True:
        placement = failover.next_placement(failed_for_s, rep.info, rules_out)
        rules_out = ()
        if placement is None:
            give_up(run, rep, journal, failover, len(failover.candidates), hint)
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
