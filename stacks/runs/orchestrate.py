"""The one way a command runs languages' jobs: `train fr`, `train fr en --parallel 2`, `train --all`,
`lm pretrain fr` (a single language is a list of one; only the view differs).

`run_languages` prepares the env's config once (the job asked, each run's share of the cores when runs go
side by side), checks that the runs starting together fit (gcp: summed GPU quota, before anything is
applied), then runs each language (`runflow.run_language`) in a worker thread: stacks are synthesized and
applied one at a time (a start lock), runs are followed side by side and each stack is destroyed as its
run ends, promoted when asked, then handed to the command's `on_ended` (the CLI mirrors it in the tracker).
One language's error is its own result and never stops the others; `exit_status` is the command's. A view
(stacks/cli/run_view.py) renders it: one language's stream of lines, or a table.
Ctrl-C raises RunsInterrupted, saying where each language was (the runs keep going).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from stacks.errors import ExitStatus, TrainstackError
from stacks.runs import promotion, runflow
from stacks.runs.runflow import DONE, PREPARING, WAITING
from trainer.params import Job

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig
    from stacks.project import Project
    from stacks.runs.language_run import LanguageRun


@dataclass
class LanguageResult:
    """How one language's part of the command ended."""

    lang: str
    exit_status: int
    duration_s: float
    outcome: "LanguageRun | None" = None
    message: str | None = None  # the error, when the language never got a final run state
    hint: str | None = None
    promotion: str | None = None  # --promote-if-better: what happened

    @property
    def ok(self) -> bool:
        return self.exit_status == ExitStatus.SUCCESS

    @property
    def run_ended(self) -> bool:
        """The language's run has its final status (it was followed to its end, not detached from)."""
        return self.outcome is not None and self.outcome.status is not None and self.outcome.status.terminal


class RunsInterrupted(TrainstackError):
    """Ctrl-C: the command stops; `where[lang]` is (phase, run id or None) for every language asked."""

    exit_status = ExitStatus.INTERRUPTED

    def __init__(self, where: dict[str, tuple[str, str | None]]):
        super().__init__("interrupted")
        self.where = where


class RunView(Protocol):
    echo: Callable | None  # Terraform's own output (--debug), or None

    def reporter(self, lang: str):
        """The language's runs.watch.Reporter, with `finished(result)` called as the language ends."""


def exit_status(results: list[LanguageResult]) -> int:
    """0 when every language succeeded; else the status of the first one that did not (in the order given)."""
    return next((r.exit_status for r in results if not r.ok), ExitStatus.SUCCESS)


def prepared_config(
    project: "Project", config: "EnvConfig", sets: list[str], langs: list[str], *, job: Job, parallel: int
) -> "EnvConfig":
    """The env's config for this command: runs side by side share the local cores (the user's --set wins),
    and a job other than training is set on each configured language (an unknown one fails as itself)."""
    from stacks.targets import target_of

    first = target_of(config).side_by_side_sets(config, min(parallel, len(langs))) if parallel > 1 else []
    last = (
        [f"languages.{lang}.trainer.job={job}" for lang in langs if lang in config.languages]
        if job != Job.CLASSIFIER
        else []
    )
    return project.load(config.env, [*first, *sets, *last]) if first or last else config


def run_languages(
    project: "Project",
    config: "EnvConfig",
    langs: list[str],
    *,
    job: Job,
    detach: bool,
    view: RunView,
    describe_error: Callable,
    sets: list[str] | None = None,
    parallel: int | None = None,
    promote: bool = False,
    resume: dict[str, str] | None = None,
    on_ended: Callable[[LanguageResult], None] | None = None,
) -> list[LanguageResult]:
    """Run every language's `job` (set here, once, on each language's config: the stacks and runs read it
    there); results in the order of `langs`. `parallel`: runs at a time (default:
    all where the target runs them side by side, else one); `describe_error(exc)` -> (message, hint, code);
    `promote`: promote each successful run that beats the promoted model (a problem there is a note);
    `resume`: {lang: run id} of stopped runs to continue instead of starting new ones; `on_ended(result)`: what
    the command does with each run as soon as it has ended (trainctl: mirrors it in the tracker), from the
    language's worker thread; an error there is a warning, never the run's result."""
    from stacks.targets import target_of

    target = target_of(config)
    parallel = parallel or (len(langs) if target.runs_side_by_side else 1)
    config = prepared_config(project, config, list(sets or []), langs, job=job, parallel=parallel)
    together = [lang for lang in langs if lang in config.languages][:parallel]
    decided = target.preflight_together(config, together, None) if len(together) > 1 else {}
    return run_in_workers(
        project,
        config,
        langs,
        detach=detach,
        parallel=parallel,
        view=view,
        describe_error=describe_error,
        promote=promote,
        decided=decided,
        resume=resume,
        on_ended=on_ended,
    )


def run_in_workers(
    project,
    config,
    langs: list[str],
    *,
    detach: bool,
    parallel: int,
    view: RunView,
    describe_error: Callable,
    promote: bool = False,
    decided: dict | None = None,
    resume: dict[str, str] | None = None,
    on_ended: Callable[[LanguageResult], None] | None = None,
) -> list[LanguageResult]:
    """`parallel` worker threads take the languages in order. Ctrl-C reaches this (main) thread and raises
    RunsInterrupted, leaving the runs as they are (daemon workers: nothing waits for them). `on_ended(result)`:
    told in the language's worker as soon as its run has a final status (promoted first, when asked)."""
    start_lock = threading.Lock()
    where: dict[str, tuple[str, str | None]] = {lang: (WAITING, None) for lang in langs}
    reporters: dict = {}

    def one(lang: str) -> LanguageResult:
        started = time.monotonic()
        where[lang] = (PREPARING, None)

        def track(phase: str, run_id: str | None = None) -> None:
            where[lang] = (phase, run_id or where[lang][1])

        try:
            rep = reporters[lang] = view.reporter(lang)
            outcome = runflow.run_language(
                project,
                config,
                lang,
                detach=detach,
                rep=rep,
                echo=view.echo,
                start_lock=start_lock,
                decided=(decided or {}).get(lang),
                track=track,
                resume=(resume or {}).get(lang),
            )
        except Exception as exc:  # this language's error, reported with it; the others go on
            message, hint, code = describe_error(exc)
            return LanguageResult(lang, code, time.monotonic() - started, message=message, hint=hint)
        result = returned(lang, outcome, time.monotonic() - started)
        if promote:
            try_promotion(result, describe_error)
        return result

    def ended(lang: str, result: LanguageResult) -> None:
        where[lang] = (DONE, where[lang][1])
        rep = reporters.get(lang)
        if rep is not None:
            try:
                rep.finished(result)
            except Exception:  # the view must not lose a language's result
                pass
        if on_ended is not None and result.run_ended:
            try:
                on_ended(result)
            except Exception as exc:  # what follows a run's end never changes how it ended
                with contextlib.suppress(Exception):  # nor does a view that cannot say so
                    rep.warn(f"after run {result.outcome.run_id} ended: {describe_error(exc)[0]}")

    try:
        results = in_workers(langs, parallel, one, ended)
    except KeyboardInterrupt:
        for lang, (phase, run_id) in where.items():
            if phase == runflow.MOVING and run_id:
                with contextlib.suppress(Exception):  # the bucket unreachable: the hint still says how to resume
                    runflow.stop_moving(config, lang, run_id)
        raise RunsInterrupted(dict(where)) from None
    return [
        results.get(lang) or LanguageResult(lang, ExitStatus.INFRA_ERROR, 0.0, message="did not run") for lang in langs
    ]


def returned(lang: str, outcome: "LanguageRun", duration_s: float) -> LanguageResult:
    """The result of a language whose run_language returned: its run's final state (None: detached)."""
    from trainer.runfiles.status_file import SUCCEEDED

    failed = outcome.status is not None and outcome.status.state != SUCCEEDED
    return LanguageResult(
        lang,
        ExitStatus.RUN_FAILED if failed else ExitStatus.SUCCESS,
        duration_s,
        outcome,
        message=outcome.status.error if failed else None,
    )


def try_promotion(result: LanguageResult, describe_error: Callable) -> None:
    """--promote-if-better on a run that succeeded: what happened in `result.promotion` (a problem there is a
    note, never the run's failure)."""
    outcome = result.outcome
    if not result.ok or outcome.status is None:
        return
    try:
        result.promotion = promotion.promote_if_better(outcome.bucket, result.lang, outcome.run_id)
    except Exception as exc:
        result.promotion = f"not promoted: {describe_error(exc)[0]} (trainctl promote {result.lang} {outcome.run_id})"


def in_workers(
    langs: list[str], parallel: int, one: Callable[[str], LanguageResult], ended: Callable[[str, LanguageResult], None]
) -> dict[str, LanguageResult]:
    """{lang: one(lang)} from `parallel` daemon threads taking the languages in order, `ended(lang, result)`
    told in the same thread. The main thread only waits, so that Ctrl-C (KeyboardInterrupt) reaches it; after
    it, no language is started."""
    todo: queue.Queue[str] = queue.Queue()
    for lang in langs:
        todo.put(lang)
    results: dict[str, LanguageResult] = {}
    stopping = threading.Event()

    def worker() -> None:
        while not stopping.is_set():
            try:
                lang = todo.get_nowait()
            except queue.Empty:
                return
            try:
                result = one(lang)
            except BaseException as exc:  # a bug of ours: still this language's result, never the others'
                result = LanguageResult(
                    lang, ExitStatus.INFRA_ERROR, 0.0, message=f"unexpected {exc!r}", hint="rerun with --debug"
                )
            results[lang] = result
            ended(lang, result)

    workers = [
        threading.Thread(target=worker, name=f"trainctl-run-{i}", daemon=True)
        for i in range(max(1, min(parallel, len(langs))))
    ]
    try:
        for thread in workers:
            thread.start()
        for thread in workers:
            while thread.is_alive():  # join with a timeout, so Ctrl-C reaches this (main) thread
                thread.join(timeout=0.2)
    except KeyboardInterrupt:
        stopping.set()  # the command stops: a worker whose language ends takes no other
        raise
    return results
