"""`trainctl train LANG... | --all`: apply each language's stack, follow the runs, tear them down."""
from __future__ import annotations

import sys
import traceback
from typing import Annotated

import typer

from stacks.cli.common import EnvOpt, SetOpt, err_console, fail, mapped_errors
from stacks.cli.run_view import run_job
from stacks.errors import ExitStatus

DetachOpt = Annotated[bool, typer.Option("--detach", help="return once the stack is applied")]
LangsArg = Annotated[list[str] | None, typer.Argument(help="language codes, e.g. fr en es", show_default=False)]
AllOpt = Annotated[bool, typer.Option("--all", help="every language of the env")]
ParallelOpt = Annotated[int | None, typer.Option(
    "--parallel", min=1, help="runs at a time (gcp default: all; local default: 1, and N shares the cores N ways)")]
PromoteOpt = Annotated[bool, typer.Option(
    "--promote-if-better", help="promote each run that beats the promoted model on the same rows (trainctl promote)")]


def register(app: typer.Typer) -> None:
    app.command("train")(train)


@mapped_errors
def train(langs: LangsArg = None, all_langs: AllOpt = False, env: EnvOpt = "local", sets: SetOpt = None,
          detach: DetachOpt = False, parallel: ParallelOpt = None, promote_if_better: PromoteOpt = False):
    """Apply train-LANG, follow the run, destroy the stack, print metrics and artifact URIs.
    Several languages (or --all): one live view, each stack destroyed as its run ends, one summary;
    exit 0 only when every language succeeded."""
    if bool(langs) == all_langs:
        fail("name the languages to train, or --all, not both" if langs else "no language given",
             "e.g. trainctl train fr en, or trainctl train --all", ExitStatus.BAD_INPUT)
    if promote_if_better and detach:
        fail("--promote-if-better needs the run's result: it cannot go with --detach",
             "promote later: trainctl promote LANG RUN", ExitStatus.BAD_INPUT)
    langs = list(dict.fromkeys(langs or []))
    if len(langs) == 1 and parallel is None:
        run_job(langs[0], env, sets, detach, job="classifier", promote_if_better=promote_if_better)
        return
    run_many(langs, all_langs, env, list(sets or []), detach, parallel, promote_if_better)


def run_many(langs: list[str], all_langs: bool, env: str, sets: list[str], detach: bool, parallel: int | None,
             promote: bool) -> None:
    from stacks.cli.common import STATE, describe_error, load
    from stacks.cli.multi_view import LanguageReporter, LiveBoard, summary
    from stacks.runs.multirun import exit_status, run_languages
    from stacks.runs.promotion import promote_if_better
    from stacks.runs.runflow import resume_hint
    from stacks.targets import target_of
    from trainer.launcher.cores import share

    project, config = load(env, sets)
    langs = sorted(config.languages) if all_langs else langs
    target = target_of(config)
    parallel = parallel or (len(langs) if target.runs_side_by_side else 1)
    if parallel > 1:  # local runs side by side each get their share of the cores (gcp ignores `cores`)
        config = project.load(env, [f"defaults.cores={share(min(parallel, len(langs)))}", *sets])
    # the runs that start at once must fit together (quota on gcp), before anything is applied
    decided = target.preflight_together(config, [lang for lang in langs if lang in config.languages][:parallel], None)
    after = (lambda outcome, rep: promote_if_better(outcome.bucket, outcome.lang, outcome.run_id)) if promote else None

    def describe(exc: BaseException):
        if STATE["debug"]:
            traceback.print_exception(exc, file=sys.stderr)
        return describe_error(exc)

    with LiveBoard(langs) as board:
        try:
            results = run_languages(project, config, langs, job="classifier", detach=detach, parallel=parallel,
                                    reporter_for=lambda lang: LanguageReporter(board, lang),
                                    describe_error=describe, after_run=after, decided=decided)
        except KeyboardInterrupt:
            err_console.print("interrupted: detached from every run; the runs keep going (a stack being applied "
                              "or destroyed may be left part-way: destroy it)", soft_wrap=True)
            for lang in langs:  # every language started and not yet through its teardown
                if board.rows[lang]["started"] is not None and board.rows[lang]["ended"] is None:
                    err_console.print(f"  {lang}: {resume_hint(lang, env)}", soft_wrap=True, markup=False)
            raise typer.Exit(ExitStatus.INTERRUPTED)
    summary(results, config)
    if STATE["debug"]:
        err_console.print(f"exit status: {exit_status(results)}")
    raise typer.Exit(exit_status(results))
