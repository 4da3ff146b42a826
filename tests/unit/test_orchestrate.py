"""One orchestration for every command that runs languages: one failure stays its own, the exit code says
whether all succeeded, Ctrl-C says where each language was; one language or many differ only in the view."""

from __future__ import annotations

import _thread
import signal
import threading
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from stacks.cli.common import describe_error
from stacks.errors import ExitStatus, UnknownLanguageError
from stacks.runs import orchestrate, promotion, runflow
from stacks.runs.orchestrate import RunsInterrupted, exit_status, run_in_workers


class View:
    echo = None

    def __init__(self):
        self.log = []

    def reporter(self, lang):
        return SimpleNamespace(finished=lambda result: self.log.append((lang, result.exit_status)))


def succeeded(lang, **_):
    return SimpleNamespace(
        lang=lang, run_id=f"run-{lang}", bucket=None, status=SimpleNamespace(state="SUCCEEDED", error=None)
    )


def run(langs, parallel=1, **kwargs):
    return run_in_workers(
        None, None, langs, detach=False, parallel=parallel, describe_error=describe_error, **{"view": View(), **kwargs}
    )


def test_one_language_fails_alone_and_workers_take_languages_in_order(monkeypatch):
    started, lock = [], threading.Lock()

    def fake_run_language(project, config, lang, **_):
        with lock:
            started.append(lang)
        if lang == "xx":
            raise UnknownLanguageError("xx", "local", ["en", "fr"])
        if lang == "es":
            return SimpleNamespace(lang=lang, status=SimpleNamespace(state="FAILED", error="boom"))
        return succeeded(lang)

    monkeypatch.setattr(runflow, "run_language", fake_run_language)
    view = View()
    results = run(["fr", "xx", "es", "en"], view=view)
    assert started == ["fr", "xx", "es", "en"]  # one at a time, in the order given, past every failure
    assert [(r.lang, r.exit_status) for r in results] == [
        ("fr", 0),
        ("xx", ExitStatus.BAD_INPUT),
        ("es", ExitStatus.RUN_FAILED),
        ("en", 0),
    ]
    assert "not configured" in results[1].message and results[2].message == "boom"
    assert exit_status(results) == ExitStatus.BAD_INPUT  # the first language that did not succeed
    assert exit_status([results[0], results[3]]) == ExitStatus.SUCCESS
    assert sorted(view.log) == sorted((r.lang, r.exit_status) for r in results)


def test_parallel_runs_follow_together(monkeypatch):
    both_in = threading.Barrier(2, timeout=10)  # only passes if two languages are followed at once

    def fake_run_language(project, config, lang, *, start_lock, **_):
        with start_lock:
            pass  # the apply: one at a time
        both_in.wait()
        return succeeded(lang)

    monkeypatch.setattr(runflow, "run_language", fake_run_language)
    assert [r.ok for r in run(["fr", "en"], parallel=2)] == [True, True]


def test_a_promotion_error_or_a_view_error_never_costs_another_language(monkeypatch):
    def promote_if_better(bucket, lang, run_id):
        if lang == "fr":
            raise OSError("bucket unreachable")
        return "promoted"

    class BrokenView(View):
        def reporter(self, lang):
            return SimpleNamespace(finished=lambda result: 1 / 0)

    monkeypatch.setattr(runflow, "run_language", lambda project, config, lang, **_: succeeded(lang))
    monkeypatch.setattr(promotion, "promote_if_better", promote_if_better)
    results = run(["fr", "en"], view=BrokenView(), promote=True)
    assert [(r.lang, r.ok, r.promotion) for r in results] == [
        ("fr", True, "not promoted: unexpected OSError: bucket unreachable (trainctl promote fr run-fr)"),
        ("en", True, "promoted"),
    ]


def test_ctrl_c_says_where_each_language_was(monkeypatch):
    never = threading.Event()

    def fake_run_language(project, config, lang, *, track, **_):
        if lang == "fr":
            track(runflow.APPLYING)
            track(runflow.FOLLOWING, "run-fr")
            _thread.interrupt_main()  # Ctrl-C, as the main thread waits for the workers
            never.wait(10)
        return succeeded(lang)

    monkeypatch.setattr(runflow, "run_language", fake_run_language)
    # Ctrl-C as a terminal delivers it, whatever this process inherited (a background job ignores SIGINT,
    # and interrupt_main does nothing then)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(RunsInterrupted) as stop:
            run(["fr", "en"])
    finally:
        signal.signal(signal.SIGINT, before)
    assert stop.value.where == {"fr": (runflow.FOLLOWING, "run-fr"), "en": (runflow.WAITING, None)}
    assert stop.value.exit_status == ExitStatus.INTERRUPTED
    never.set()


def ended(lang, state="SUCCEEDED"):
    return SimpleNamespace(
        lang=lang,
        run_id=f"run-{lang}",
        bucket=None,
        status=SimpleNamespace(state=state, error=None if state == "SUCCEEDED" else "boom", terminal=True),
    )


def test_each_run_is_handed_on_in_its_worker_as_soon_as_it_ends_promoted_first(monkeypatch):
    """`on_ended` (trainctl: the tracker's mirror) gets each language whose run has a final status, in that
    language's worker before the next language starts, after its promotion; a detached run or a language that
    never got a run is not handed on, and an error there is a warning, never the run's result."""
    events, warnings = [], []

    def fake_run_language(project, config, lang, **_):
        events.append(("start", lang))
        if lang == "es":
            raise UnknownLanguageError("es", "local", ["en", "fr"])
        if lang == "en":
            return SimpleNamespace(lang=lang, run_id="run-en", bucket=None, status=None)  # detached
        return ended(lang, "FAILED" if lang == "de" else "SUCCEEDED")

    def on_ended(result):
        in_worker = threading.current_thread().name.startswith("trainctl-run-")
        events.append(("ended", result.lang, result.promotion, in_worker))
        if result.lang == "de":
            raise RuntimeError("tracker bug")

    class WarnedView(View):
        def reporter(self, lang):
            return SimpleNamespace(finished=lambda result: None, warn=lambda message: warnings.append((lang, message)))

    monkeypatch.setattr(runflow, "run_language", fake_run_language)
    monkeypatch.setattr(promotion, "promote_if_better", lambda bucket, lang, run_id: f"promoted {run_id}")
    results = run(["fr", "en", "es", "de"], view=WarnedView(), promote=True, on_ended=on_ended)
    assert events == [
        ("start", "fr"),
        ("ended", "fr", "promoted run-fr", True),
        ("start", "en"),
        ("start", "es"),
        ("start", "de"),
        ("ended", "de", None, True),
    ]
    assert [(r.lang, r.exit_status) for r in results] == [
        ("fr", 0),
        ("en", 0),
        ("es", ExitStatus.BAD_INPUT),
        ("de", ExitStatus.RUN_FAILED),
    ]
    assert warnings == [("de", "after run run-de ended: unexpected RuntimeError: tracker bug")]


def test_a_run_that_ended_is_mirrored_even_when_the_command_is_interrupted_later(project, monkeypatch):
    from stacks import tracking
    from stacks.cli.main import app
    from stacks.tracking.export import Exported

    mirrored, never = [], threading.Event()

    def mirror(config, bucket, runs, *, champions=()):
        mirrored.append((runs, list(champions)))
        return tracking.MirrorResult(exported=[Exported(lang, run_id, "created", "m-1") for lang, run_id in runs])

    def fake_run_language(project, config, lang, **_):
        if lang == "en":  # fr has ended; Ctrl-C while en is followed
            _thread.interrupt_main()
            never.wait(10)
            return SimpleNamespace(lang=lang, run_id="run-en", bucket=None, status=None)  # still going
        return ended(lang)

    monkeypatch.setattr(runflow, "run_language", fake_run_language)
    monkeypatch.setattr(tracking, "mirror", mirror)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        r = CliRunner().invoke(app, ["train", "fr", "en", "--set", "tracking.mlflow.uri=http://127.0.0.1:9"])
    finally:
        signal.signal(signal.SIGINT, before)
        never.set()
    assert r.exit_code == ExitStatus.INTERRUPTED, r.output
    assert mirrored == [([("fr", "run-fr")], [])]
    assert "mirrored to MLflow http://127.0.0.1:9 (experiment trainstack-local): fr run-fr" in r.stdout


def test_runs_side_by_side_are_mirrored_as_each_ends_and_said_once_in_the_command_order(project, monkeypatch):
    from stacks import tracking
    from stacks.cli.main import app
    from stacks.tracking.export import Exported
    from tests.support.runs import fake_run
    from trainer.storage import open_bucket

    mirrored, en_mirrored = [], threading.Event()

    def mirror(config, bucket, runs, *, champions=()):
        mirrored.append(runs)
        if runs == [("en", "run-en")]:
            en_mirrored.set()
        return tracking.MirrorResult(exported=[Exported(lang, run_id, "created", "m-1") for lang, run_id in runs])

    def fake_run_language(project_, config, lang, **_):
        if lang == "fr":
            assert en_mirrored.wait(10)  # en's run is mirrored while fr's still goes
        fake_run(project / ".trainstack" / "local" / "bucket", lang, f"run-{lang}", f1={"a": 0.9, "b": 0.7})
        return SimpleNamespace(**{**vars(ended(lang)), "bucket": open_bucket(config.bucket)})

    monkeypatch.setattr(runflow, "run_language", fake_run_language)
    monkeypatch.setattr(tracking, "mirror", mirror)
    r = CliRunner().invoke(
        app, ["train", "fr", "en", "--parallel", "2", "--set", "tracking.mlflow.uri=http://127.0.0.1:9"]
    )
    assert r.exit_code == 0, r.output
    assert mirrored == [[("en", "run-en")], [("fr", "run-fr")]]
    said = "mirrored to MLflow http://127.0.0.1:9 (experiment trainstack-local): fr run-fr, en run-en"
    assert r.stdout.count("mirrored to MLflow") == 1 and said in r.stdout
    assert r.stdout.index("2 language(s), env local") < r.stdout.index(said)  # after the summary, as one


@pytest.mark.parametrize(
    "args, view, parallel",
    [
        (["train", "fr"], "StreamView", None),
        (["train", "fr", "--parallel", "1"], "StreamView", 1),
        (["lm", "pretrain", "fr"], "StreamView", None),
        (["train", "fr", "en"], "TableView", None),
        (["train", "--all", "--parallel", "2"], "TableView", 2),
    ],
)
def test_every_command_that_runs_languages_goes_through_the_one_orchestration(
    project, monkeypatch, args, view, parallel
):
    from stacks.cli.main import app

    seen = {}

    def fake_run_languages(project, config, langs, *, job, view, parallel, **_):
        seen.update(langs=langs, job=job, view=type(view).__name__, parallel=parallel)
        return [orchestrate.LanguageResult(lang, ExitStatus.SUCCESS, 0.0) for lang in langs]

    monkeypatch.setattr(orchestrate, "run_languages", fake_run_languages)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    langs = [a for a in args[1:] if a in ("fr", "en")] if "--all" not in args else ["en", "fr"]
    assert seen == {
        "langs": langs,
        "job": "pretrain-lm" if args[0] == "lm" else "classifier",
        "view": view,
        "parallel": parallel,
    }


def test_the_table_shows_each_language_s_last_epoch_from_its_status_not_its_log():
    from stacks.cli.multi_view import TableView
    from trainer.runfiles.status_file import RUNNING, RunStatus

    board = TableView(["fr"])
    rep = board.reporter("fr")
    rep.log_line("classifier [1/1] epoch 9/9  train_loss 9.0  valid_loss 9.0")  # log text is not read for it
    assert board.rows["fr"]["metric"] == ""
    rep.progress(
        RunStatus(
            "r1",
            "fr",
            "local",
            state=RUNNING,
            stage="classifier",
            epoch=3,
            epochs=4,
            last_epoch={"train_loss": 0.6, "valid_loss": 0.63, "macro_f1": 0.55},
        )
    )
    assert board.rows["fr"]["metric"] == "train_loss 0.6000  valid_loss 0.6300  macro_f1 0.5500"
    assert board.rows["fr"]["epoch"] == "epoch 3/4" and board.rows["fr"]["stage"] == "classifier"
