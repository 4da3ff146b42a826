"""The capacity ladder as a run climbs it (stacks.config.capacity): the next rung once every placement lacked the one
before, the rung a run followed again is on, and how long a rung's queue may hold a run before any VM exists."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stacks.runs.failover import Failover, RunJournal
    from stacks.runs.language_run import LanguageRun

RUNG_NAMES = {"spot": "Spot", "flex_start": "flex-start", "on_demand": "on-demand"}


def take_next_rung(run: LanguageRun, rep, failover: Failover) -> bool:
    """The capacity ladder: once every placement lacked the run's rung, the next rung at the same placements (the
    run's config and settings replaced, the waiting clock kept); False on the last rung."""
    rungs = run.settings.next_rungs()
    if not rungs:
        return False
    target, lang, was, rung = run.target, run.lang, run.settings.rung, rungs[0]
    on_rung = run.config.languages[lang].on_rung(rung)
    run.config = run.config.model_copy(update={"languages": {**run.config.languages, lang: on_rung}})
    run.settings = run.config.language(lang)
    blocked = len({id(p) for p in failover.tried_blocked})
    asked = f"{len(failover.candidates) - blocked} placement(s)" + (
        f" ({blocked} more blocked: it preempted the run within zone_block_minutes)" if blocked else ""
    )
    rep.warn(
        f"no {RUNG_NAMES[was]} capacity in any of {asked}: capacity takes its next "
        f"rung, {RUNG_NAMES[rung]} VMs, for run {run.run_id}, at the {RUNG_NAMES[rung]} price:"
    )
    target.estimate(run.config, lang, run.bucket, rep)
    # in the target's order: the zones' ranking is by Spot preemptions, which say nothing of a later rung's VMs
    failover.candidates[:] = target.placements(run.config, lang, rep)
    return True


def keep_rung(run: LanguageRun, journal: RunJournal) -> None:
    """A run followed again is on the rung its last placement took (a later rung of its ladder, after a dry pass),
    not on its ladder's first."""
    placed = journal.data["placements"]
    rung = placed[-1].get("rung") if placed else None
    if rung and rung != run.settings.rung and rung in run.settings.capacity:
        on_rung = run.config.languages[run.lang].on_rung(rung)
        run.config = run.config.model_copy(update={"languages": {**run.config.languages, run.lang: on_rung}})
        run.settings = run.config.language(run.lang)


def queue_wait_s(settings) -> float:
    """How long a placement may hold the run in a queue before any VM exists (a flex-start request), on top of the
    target's time for a first status.json."""
    return settings.flex_start_wait_minutes * 60 if settings.rung == "flex_start" else 0.0
