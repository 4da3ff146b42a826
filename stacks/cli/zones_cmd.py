"""`trainctl zones LANG`: the order a run of LANG tries its zones in, and why (stacks.runs.zone_ranking)."""

from __future__ import annotations

from stacks.cli.common import EnvOpt, LangArg, RunOpt, SetOpt, console, open_env


def register(app) -> None:
    app.command("zones")(zones)


def zones(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None, run: RunOpt = None):
    """Show the order a new run of LANG tries its zones in, and why: each zone's preemptions per VM hour over the
    language's runs of the last zone_history_days, the cloud's capacity advice (gcp; "no advice" where the project
    may not ask), and, with --run, the zones that run may not use again yet (zone_block_minutes). Zones alike keep
    the env's order."""
    from stacks.runs.failover import read_journal
    from stacks.runs.records import pick_run
    from stacks.runs.zone_ranking import rank_zones
    from stacks.targets import target_of

    config, bucket = open_env(env, sets, lang)
    target = target_of(config)
    journal = read_journal(bucket, lang, pick_run(bucket, lang, run)) if run else None
    ranking = rank_zones(target, config, lang, bucket, journal=journal)
    if not ranking.zones:
        console.print(
            f"{lang} (env {env}): nothing to rank: target {config.target} places its runs without zones here",
            markup=False,
            soft_wrap=True,
        )
        return
    said = "ranked by data" if ranking.reordered() else "in the env's order (nothing tells them apart)"
    console.print(f"zones of {lang} (env {env}), {said}; {ranking.source_line()}", markup=False, soft_wrap=True)
    for line in ranking.lines():
        console.print(f"  {line}", markup=False, soft_wrap=True)
