"""`trainctl train LANG... | --all`: apply each language's stack, follow the runs, tear them down."""

from __future__ import annotations

from typing import Annotated

import typer

from stacks.cli.common import EnvOpt, SetOpt, checked_run_ids, fail, open_env
from stacks.cli.run_view import run_command
from stacks.errors import ExitStatus
from trainer.params import Job

DetachOpt = Annotated[bool, typer.Option("--detach", help="return once the stack is applied")]
LangsArg = Annotated[list[str] | None, typer.Argument(help="language codes, e.g. fr en es", show_default=False)]
AllOpt = Annotated[bool, typer.Option("--all", help="every language of the env")]
ParallelOpt = Annotated[
    int | None,
    typer.Option(
        "--parallel", min=1, help="runs at a time (gcp default: all; local default: 1, and N shares the cores N ways)"
    ),
]
ResumeOpt = Annotated[
    str | None,
    typer.Option(
        "--resume",
        metavar="RUN_ID",
        callback=checked_run_ids,
        help="continue this stopped run of the one language named (no capacity, "
        "max_run_hours, destroyed) from its checkpoints, with the same data",
    ),
]
PromoteOpt = Annotated[
    bool,
    typer.Option(
        "--promote-if-better", help="promote each run that beats the promoted model on the same rows (trainctl promote)"
    ),
]
TrainJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help=(
            "print JSON on stdout once the runs end (with --detach: once applied), the log and tables on stderr: "
            "{env, exit_status, runs}; runs: one {lang, run_id, state, exit_status, macro_f1, tfidf_macro_f1, kept, "
            "url, error, hint, promotion} per language (state as `runs --json` has it, ERROR when no run started; "
            "run_id and url null then)"
        ),
    ),
]


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def train(
    langs: LangsArg = None,
    all_langs: AllOpt = False,
    env: EnvOpt = "local",
    sets: SetOpt = None,
    detach: DetachOpt = False,
    parallel: ParallelOpt = None,
    promote_if_better: PromoteOpt = False,
    resume: ResumeOpt = None,
    as_json: TrainJsonOpt = False,
):
    """Apply train-LANG, follow the run, destroy the stack, print metrics and artifact URIs.
    Several languages (or --all): one live view, each stack destroyed as its run ends, one summary;
    exit 0 only when every language succeeded."""
    if bool(langs) == all_langs:
        fail(
            "name the languages to train, or --all, not both" if langs else "no language given",
            "e.g. trainctl train fr en, or trainctl train --all",
            ExitStatus.BAD_INPUT,
        )
    if promote_if_better and detach:
        fail(
            "--promote-if-better needs the run's result: it cannot go with --detach",
            "promote later: trainctl promote LANG RUN",
            ExitStatus.BAD_INPUT,
        )
    if resume is not None and (all_langs or len(set(langs or [])) != 1):
        fail(
            "--resume continues one run: name its one language",
            f"e.g. trainctl train fr --resume {resume}",
            ExitStatus.BAD_INPUT,
        )
    if resume is not None:  # a run of that language, before anything is synthesized or applied
        from stacks.runs.records import pick_run

        pick_run(open_env(env, sets, langs[0])[1], langs[0], resume)
    run_command(
        list(dict.fromkeys(langs)) if langs else None,
        env,
        sets,
        detach,
        job=Job.CLASSIFIER,
        parallel=parallel,
        promote=promote_if_better,
        resume={langs[0]: resume} if resume is not None else None,
        as_json=as_json,
    )
