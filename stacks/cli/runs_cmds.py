"""`trainctl status | logs | runs | predict`: read runs back from the bucket."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import typer
from rich.table import Table

from stacks.cli.common import EnvOpt, LangArg, SetOpt, console, load, mapped_errors
from stacks.errors import RunNotFoundError

RunOpt = Annotated[str | None, typer.Option("--run", help="run id (default: the newest)")]


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("logs")(logs)
    app.command("runs")(runs)
    app.command("predict")(predict)


def _pick_run(bucket, lang: str, run_id: str | None, *, succeeded: bool = False) -> str:
    from trainer.runs import SUCCEEDED, list_run_ids, read_status

    ids = list_run_ids(bucket, lang)
    if run_id:
        if run_id not in ids:
            raise RunNotFoundError(f"no run {run_id!r} for {lang}", hint=f"list them: trainctl runs --lang {lang}")
        return run_id
    if succeeded:
        ids = [i for i in ids if (s := read_status(bucket, lang, i)) and s.state == SUCCEEDED]
    if not ids:
        raise RunNotFoundError(f"no {'successful ' if succeeded else ''}run for {lang} in {bucket.uri}",
                               hint=f"start one: trainctl train {lang}")
    return ids[-1]


def _duration(status) -> float | None:
    if not status.started_at:
        return None
    end = status.finished_at or status.updated_at
    return (datetime.fromisoformat(end) - datetime.fromisoformat(status.started_at)).total_seconds()


@mapped_errors
def status(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None, run: RunOpt = None):
    """Show the state of a language's newest (or given) run."""
    from stacks.lifecycle import bucket_of, language_settings
    from trainer.runs import read_status

    _, config = load(env, sets)
    language_settings(config, lang)
    bucket = bucket_of(config)
    run_id = _pick_run(bucket, lang, run)
    s = read_status(bucket, lang, run_id)
    console.print(f"run {s.run_id} ({s.lang}, env {s.env}): [bold]{s.state}[/] · stage {s.stage}"
                  + (f" · epoch {s.epoch}/{s.epochs}" if s.epochs else ""))
    console.print(f"  started {s.started_at} · updated {s.updated_at}"
                  + (f" · finished {s.finished_at}" if s.finished_at else "") + f" · resumed {s.resumed}x")
    if s.error:
        console.print(f"  [red]error:[/] {s.error}")


@mapped_errors
def logs(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None, run: RunOpt = None,
         follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing until the run ends")] = False):
    """Print a run's log.txt."""
    from stacks.cli.report import ConsoleReporter
    from stacks.lifecycle import LogTail, bucket_of, follow as follow_run, language_settings

    _, config = load(env, sets)
    language_settings(config, lang)
    bucket = bucket_of(config)
    run_id = _pick_run(bucket, lang, run)
    if not follow:
        for line in LogTail(bucket, lang, run_id).new_lines():
            typer.echo(line)
        return
    with ConsoleReporter() as rep:
        final = follow_run(bucket, lang, run_id, rep)
    console.print(f"run {run_id} ended: {final.state}; `trainctl gc --env {env}` tears down its stack")


@mapped_errors
def runs(env: EnvOpt = "local", sets: SetOpt = None,
         lang: Annotated[str | None, typer.Option("--lang", help="only this language")] = None,
         as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False):
    """Table of past runs: run, lang, state, started, duration, macro-F1, resumes after interruptions."""
    from stacks.lifecycle import bucket_of, language_settings
    from trainer.runs import list_run_ids, read_metrics, read_status

    _, config = load(env, sets)
    langs = [lang] if lang else list(config.languages)
    if lang:
        language_settings(config, lang)
    bucket = bucket_of(config)
    rows = []
    for code in langs:
        for run_id in list_run_ids(bucket, code):
            s = read_status(bucket, code, run_id)
            m = read_metrics(bucket, code, run_id) or {}
            rows.append({"run_id": run_id, "lang": code, "state": s.state, "started_at": s.started_at,
                         "duration_s": _duration(s), "macro_f1": m.get("macro_f1"), "resumed": s.resumed,
                         "error": s.error})
    rows.sort(key=lambda r: r["run_id"])
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"runs in {config.bucket} (times UTC)")
    for col in ("run", "lang", "state", "started", "duration", "macro-F1", "resumed"):
        table.add_column(col, no_wrap=col in ("run", "started"))
    for r in rows:
        dur = f"{r['duration_s']:.0f}s" if r["duration_s"] is not None else ""
        f1 = f"{r['macro_f1']:.3f}" if r["macro_f1"] is not None else ""
        started = (r["started_at"] or "")[:16].replace("T", " ")  # minutes, UTC
        table.add_row(r["run_id"], r["lang"], r["state"], started, dur, f1, str(r["resumed"] or ""))
    console.print(table)


@mapped_errors
def predict(lang: LangArg, texts: Annotated[list[str], typer.Argument(help="texts to classify")],
            env: EnvOpt = "local", sets: SetOpt = None, run: RunOpt = None):
    """Classify texts with a run's model.pth (default: newest successful run)."""
    import tempfile
    from pathlib import Path

    from stacks.lifecycle import bucket_of, language_settings
    from trainer.predict import load_model, predict_texts
    from trainer.runs import read_metrics, run_key

    _, config = load(env, sets)
    language_settings(config, lang)
    bucket = bucket_of(config)
    run_id = _pick_run(bucket, lang, run, succeeded=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.pth"
        bucket.download(run_key(lang, run_id, "model.pth"), model)
        learn = load_model(model)
        metrics = read_metrics(bucket, lang, run_id)
        for text, (labels, probs) in zip(texts, predict_texts(learn, texts, metrics)):
            shown = ", ".join(f"{k} {v:.2f}" for k, v in probs.items())
            console.print(f"[bold]{';'.join(labels)}[/]\t{text}\n  [dim]{shown}[/]")
