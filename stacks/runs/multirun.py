"""Several languages in one command: `trainctl train fr en es` / `--all`.

Each language is `runflow.run_language` in a worker thread: stacks are synthesized and applied
one at a time (a start lock), their runs are followed side by side and each stack is destroyed
as its run ends. `parallel` workers take languages in the order given; one language's error is
its own result and never stops the others.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from stacks.errors import ExitStatus

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig
    from stacks.project import Project
    from stacks.runs.runflow import RunOutcome


@dataclass
class LanguageResult:
    """How one language's part of the command ended."""

    lang: str
    exit_status: int
    duration_s: float
    outcome: "RunOutcome | None" = None
    message: str | None = None  # the error, when the language never got a final run state
    hint: str | None = None
    promotion: str | None = None  # --promote-if-better: what happened

    @property
    def ok(self) -> bool:
        return self.exit_status == ExitStatus.SUCCESS


def exit_status(results: list[LanguageResult]) -> int:
    """0 when every language succeeded; else the status of the first one that did not (in the order given)."""
    return next((r.exit_status for r in results if not r.ok), ExitStatus.SUCCESS)


def run_languages(project: "Project", config: "EnvConfig", langs: list[str], *, job: str, detach: bool,
                  parallel: int, reporter_for: Callable, describe_error: Callable,
                  after_run: Callable | None = None, decided: dict | None = None) -> list[LanguageResult]:
    """Run every language; `reporter_for(lang)` gives each its reporter (with a `finished(result)`),
    `describe_error(exc)` -> (message, hint, code), `after_run(outcome, rep)` -> a promotion note,
    `decided`: per language, what Target.preflight_together decided (gcp: the zone).
    Returns the results in the order of `langs`. Ctrl-C raises KeyboardInterrupt here, leaving the
    runs as they are (daemon workers: nothing waits for them)."""
    from stacks.runs.runflow import run_language
    from trainer.records.runs import SUCCEEDED

    start_lock = threading.Lock()
    todo: queue.Queue[str] = queue.Queue()
    for lang in langs:
        todo.put(lang)
    results: dict[str, LanguageResult] = {}
    reporters: dict = {}

    def one(lang: str) -> LanguageResult:
        started = time.monotonic()
        try:
            rep = reporters[lang] = reporter_for(lang)
            outcome = run_language(project, config, lang, job=job, detach=detach, rep=rep, start_lock=start_lock,
                                   decided=(decided or {}).get(lang))
        except Exception as exc:  # this language's error, reported with it; the others go on
            message, hint, code = describe_error(exc)
            return LanguageResult(lang, code, time.monotonic() - started, message=message, hint=hint)
        failed = outcome.status is not None and outcome.status.state != SUCCEEDED
        result = LanguageResult(lang, ExitStatus.RUN_FAILED if failed else ExitStatus.SUCCESS,
                                time.monotonic() - started, outcome, message=outcome.status.error if failed else None)
        if not failed and outcome.status is not None and after_run is not None:
            try:
                result.promotion = after_run(outcome, rep)
            except Exception as exc:  # the run succeeded: a promotion problem is a note, not its failure
                result.promotion = f"not promoted: {describe_error(exc)[0]}"
        return result

    def worker() -> None:
        while True:
            try:
                lang = todo.get_nowait()
            except queue.Empty:
                return
            try:
                result = one(lang)
            except BaseException as exc:  # a bug of ours: still this language's result, never the others'
                result = LanguageResult(lang, ExitStatus.INFRA_ERROR, 0.0, message=f"unexpected {exc!r}",
                                        hint="rerun with --debug")
            results[lang] = result
            if lang in reporters:
                try:
                    reporters[lang].finished(result)
                except Exception:  # the view must not lose a language's result
                    pass

    workers = [threading.Thread(target=worker, name=f"trainctl-run-{i}", daemon=True)
               for i in range(max(1, min(parallel, len(langs))))]
    for thread in workers:
        thread.start()
    for thread in workers:
        while thread.is_alive():  # join with a timeout, so Ctrl-C reaches this (main) thread
            thread.join(timeout=0.2)
    return [results.get(lang) or LanguageResult(lang, ExitStatus.INFRA_ERROR, 0.0, message="did not run")
            for lang in langs]
