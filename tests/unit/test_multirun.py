"""Several languages in one command: one failure stays its own, the exit code says whether all succeeded."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from stacks.runs import runflow
from stacks.cli.common import describe_error
from stacks.errors import ExitStatus, UnknownLanguageError
from stacks.runs.multirun import exit_status, run_languages


class Rep:
    def __init__(self, lang, log):
        self.lang, self.log = lang, log

    def finished(self, result):
        self.log.append((self.lang, result.exit_status))


def test_one_language_fails_alone_and_workers_take_languages_in_order(monkeypatch):
    started, lock = [], threading.Lock()

    def fake_run_language(project, config, lang, *, job, detach, rep, start_lock, decided=None):
        with lock:
            started.append(lang)
        if lang == "xx":
            raise UnknownLanguageError("xx", "local", ["en", "fr"])
        state = "FAILED" if lang == "es" else "SUCCEEDED"
        return SimpleNamespace(lang=lang, status=SimpleNamespace(state=state, error="boom" if state == "FAILED" else None))

    monkeypatch.setattr(runflow, "run_language", fake_run_language)
    log: list = []
    results = run_languages(None, None, ["fr", "xx", "es", "en"], job="classifier", detach=False, parallel=1,
                            reporter_for=lambda lang: Rep(lang, log), describe_error=describe_error)
    assert started == ["fr", "xx", "es", "en"]  # one at a time, in the order given, past every failure
    assert [(r.lang, r.exit_status) for r in results] == [("fr", 0), ("xx", ExitStatus.BAD_INPUT),
                                                           ("es", ExitStatus.RUN_FAILED), ("en", 0)]
    assert "not configured" in results[1].message and results[2].message == "boom"
    assert exit_status(results) == ExitStatus.BAD_INPUT  # the first language that did not succeed
    assert exit_status([results[0], results[3]]) == ExitStatus.SUCCESS
    assert sorted(log) == sorted((r.lang, r.exit_status) for r in results)


def test_parallel_runs_follow_together(monkeypatch):
    both_in = threading.Barrier(2, timeout=10)  # only passes if two languages are followed at once

    def fake_run_language(project, config, lang, *, job, detach, rep, start_lock, decided=None):
        with start_lock:
            pass  # the apply: one at a time
        both_in.wait()
        return SimpleNamespace(lang=lang, status=SimpleNamespace(state="SUCCEEDED", error=None))

    monkeypatch.setattr(runflow, "run_language", fake_run_language)
    results = run_languages(None, None, ["fr", "en"], job="classifier", detach=False, parallel=2,
                            reporter_for=lambda lang: Rep(lang, []), describe_error=describe_error)
    assert [r.ok for r in results] == [True, True]


def test_a_promotion_error_or_a_view_error_never_costs_another_language(monkeypatch):
    def fake_run_language(project, config, lang, *, job, detach, rep, start_lock, decided=None):
        return SimpleNamespace(lang=lang, status=SimpleNamespace(state="SUCCEEDED", error=None))

    def after_run(outcome, rep):
        if outcome.lang == "fr":
            raise OSError("bucket unreachable")
        return "promoted"

    class BrokenView(Rep):
        def finished(self, result):
            raise RuntimeError("view broke")

    monkeypatch.setattr(runflow, "run_language", fake_run_language)
    results = run_languages(None, None, ["fr", "en"], job="classifier", detach=False, parallel=1,
                            reporter_for=lambda lang: BrokenView(lang, []), describe_error=describe_error,
                            after_run=after_run)
    assert [(r.lang, r.ok, r.promotion) for r in results] == [
        ("fr", True, "not promoted: unexpected OSError: bucket unreachable"), ("en", True, "promoted")]
