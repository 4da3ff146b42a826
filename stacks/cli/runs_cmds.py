"""`trainctl status | logs | runs [show | compare]`: read runs back from the bucket.

Every read command takes `--json` (shapes in the README, "JSON output"); without a
terminal the human output is unwrapped lines and tab-separated tables (report.print_table).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from stacks.cli import export_cmd
from stacks.cli.common import (
    EnvOpt,
    LangArg,
    RunArg,
    RunOpt,
    SetOpt,
    check_output_file,
    checked_run_ids,
    console,
    emit_json,
    err_console,
    open_env,
)
from stacks.cli.run_document import print_run, run_document
from stacks.runs.records import find_run, pick_run

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (stable keys, see the README)")]
STATUS_KEYS = (
    "run_id",
    "lang",
    "env",
    "state",
    "stage",
    "epoch",
    "epochs",
    "started_at",
    "updated_at",
    "finished_at",
    "error",
    "resumed",
    "job",
    "progress",
)

runs_app = typer.Typer(help="Past and current runs of every language in the bucket.")


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("logs")(logs)
    app.add_typer(runs_app, name="runs")
    export_cmd.register(runs_app)


def status(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None, run: RunOpt = None, as_json: JsonOpt = False):
    """Show the state of a language's newest (or given) run: STARTING until its first status."""
    from stacks.runs.records import run_state

    config, bucket = open_env(env, sets, lang, configured=False)
    run_id = pick_run(bucket, lang, run)
    state, s = run_state(bucket, lang, run_id, config)
    data = (
        {k: getattr(s, k) for k in STATUS_KEYS}
        if s
        else {**dict.fromkeys(STATUS_KEYS), "run_id": run_id, "lang": lang, "env": env, "resumed": 0}
    )
    data.update(state=state, url=bucket.url(f"{lang}/runs/{run_id}"))
    errors = creation_errors(config, bucket, lang, run_id) if state in ("STARTING", "RUNNING") else []
    data["vm_errors"] = [e.line() for e in errors]
    if as_json:
        emit_json(data)
        return
    if s is None:
        console.print(
            f"run {run_id} ({lang}, env {env}): [bold]{state}[/] · no status.json yet (the trainer has not started)",
            soft_wrap=True,
        )
    else:
        console.print(
            f"run {s.run_id} ({s.lang}, env {s.env}): [bold]{s.state}[/] · stage {s.stage}"
            + (f" · {s.position()}" if s.epochs else ""),
            soft_wrap=True,
        )
        console.print(
            f"  started {s.started_at} · updated {s.updated_at}"
            + (f" · finished {s.finished_at}" if s.finished_at else "")
            + f" · resumed {s.resumed}x"
        )
        if s.error:
            console.print(f"  [red]error:[/] {escape(s.error)}", soft_wrap=True)
    if errors:
        console.print("  VM creation errors (the group keeps retrying):")
        for error in errors:
            console.print(f"    {escape(error.line())}", soft_wrap=True)
        console.print(f"  what to do: {escape(errors[-1].hint)}", soft_wrap=True)


def creation_errors(config, bucket, lang: str, run_id: str) -> list:
    """The errors the target met creating the run's machines (gcp: its group's error list); [] where it has none."""
    from types import SimpleNamespace

    from stacks.targets import target_of

    reporter = SimpleNamespace(
        warn=lambda message: console.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)
    )
    poll = target_of(config).creation_errors(config, lang, reporter, bucket=bucket, run_id=run_id)
    return poll() if poll else []


class JsonLinesReporter:
    """`logs --follow --json`: one JSON object per log line on stdout, notes on stderr."""

    def __init__(self, lang: str, run_id: str):
        self.lang, self.run_id = lang, run_id

    def info(self, message: str) -> None:
        print(message, file=sys.stderr)

    warn = info

    def log_line(self, line: str) -> None:
        typer.echo(json.dumps({"run_id": self.run_id, "lang": self.lang, "line": line}))

    def progress(self, status) -> None:
        pass


def logs(
    lang: LangArg,
    env: EnvOpt = "local",
    sets: SetOpt = None,
    run: RunOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing until the run ends")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help='JSON lines: {"run_id", "lang", "line"} per log line')
    ] = False,
):
    """Print a run's log.txt."""
    from stacks.cli.run_console import ConsoleReporter
    from stacks.runs.watch import LogTail
    from stacks.runs.watch import follow as follow_run
    from stacks.targets import target_of
    from trainer.runfiles.status_file import read_status

    config, bucket = open_env(env, sets, lang, configured=False)
    run_id = pick_run(bucket, lang, run)
    if not follow:
        rep = JsonLinesReporter(lang, run_id) if as_json else None
        for line in LogTail(bucket, lang, run_id).new_lines():
            rep.log_line(line) if rep else typer.echo(line)
        return
    target = target_of(config)  # a VM may take many minutes to write the first status
    timing = {"poll_s": target.poll_s, "appear_timeout_s": target.status_appear_timeout_s}
    if read_status(bucket, lang, run_id) is None:
        from stacks.runs.watch import live_state

        if live_state(bucket, lang, run_id, target.status_appear_timeout_s) is None:
            for line in LogTail(bucket, lang, run_id).new_lines():
                typer.echo(line)
            err_console.print(
                f"run {run_id} has no status.json and is not starting (never started, or its start "
                f"failed): nothing to follow; `trainctl status {lang} --env {env} --run {run_id}`"
            )
            return
        err_console.print(
            f"run {run_id} has no status.json yet (STARTING): following it as soon as its trainer "
            f"writes one (up to {target.status_appear_timeout_s / 60:.0f} min)"
        )
    if as_json:
        final = follow_run(bucket, lang, run_id, JsonLinesReporter(lang, run_id), **timing)
        print(f"run {run_id} ended: {final.state}", file=sys.stderr)
        return
    with ConsoleReporter() as rep:
        final = follow_run(bucket, lang, run_id, rep, **timing)
    console.print(f"run {run_id} ended: {final.state}; `trainctl gc --env {env}` tears down its stack")


def _money(value) -> str:
    return "?" if value is None else f"${value:.2f}"


@runs_app.callback(invoke_without_command=True)
def runs(
    ctx: typer.Context,
    env: EnvOpt = "local",
    sets: SetOpt = None,
    lang: Annotated[str | None, typer.Option("--lang", help="only this language")] = None,
    as_json: JsonOpt = False,
):
    """Every run of every language in the bucket: state, started, duration, macro-F1 next to the TF-IDF
    baseline's on the same rows, resumes, est. cost."""
    if ctx.invoked_subcommand is not None:
        return
    from stacks.cli.run_console import print_table
    from stacks.runs.records import bucket_languages, run_ids, run_row

    config, bucket = open_env(env, sets, lang, configured=False)
    langs = [lang] if lang else sorted({*bucket_languages(bucket)})
    from stacks.runs.promotion import read_current

    promoted = {code: (read_current(bucket, code) or {}).get("run_id") for code in langs}
    rows = [
        {**run_row(bucket, config, code, run_id), "promoted": promoted[code] == run_id}
        for code in langs
        for run_id in run_ids(bucket, code)
    ]
    rows.sort(key=lambda r: (r["run_id"], r["lang"]))
    if as_json:
        emit_json(rows)
        return
    table = Table(title=f"runs in {config.bucket} (times UTC; cost: estimated, USD)")
    for col in (
        "run",
        "lang",
        "state",
        "started",
        "duration",
        "macro-F1",
        "kept",
        "TF-IDF",
        "Δ",
        "rows",
        "resumed",
        "restarts",
        "VM time",
        "est. cost",
    ):
        table.add_column(col, no_wrap=col in ("run", "started"))
    for r in rows:
        dur = f"{r['duration_s']:.0f}s" if r["duration_s"] is not None else ""
        f1 = f"{r['macro_f1']:.3f}" if r["macro_f1"] is not None else ""
        started = (r["started_at"] or "")[:16].replace("T", " ")  # minutes, UTC
        lang_cell = r["lang"] if r["configured"] else f"{r['lang']} (not in env {env})"
        tfidf = r["tfidf_macro_f1"]
        delta = f"{r['macro_f1'] - tfidf:+.3f}" if tfidf is not None and r["macro_f1"] is not None else ""
        table.add_row(
            r["run_id"] + (" *" if r["promoted"] else ""),
            lang_cell,
            r["state"],
            started,
            dur,
            f1,
            r.get("kept") or "",
            f"{tfidf:.3f}" if tfidf is not None else "",
            delta,
            r["scored_rows"] or "",
            str(r["resumed"] or ""),
            str(r["restarts"] or ""),
            f"{r['billed_vm_s'] / 3600:.2f}h",
            _money(r["est_cost"]),
        )
    print_table(table)
    if any(r["promoted"] for r in rows):
        console.print("* the promoted model of its language (`trainctl predict` uses it; trainctl promote)")
    for source in sorted({r["prices_source"] for r in rows if r.get("prices_source")}):
        console.print(f"costs priced from the {source}", soft_wrap=True)


@runs_app.command("show")
def show(
    run_id: RunArg,
    env: EnvOpt = "local",
    sets: SetOpt = None,
    lang: Annotated[str | None, typer.Option("--lang", help="the run's language (default: searched)")] = None,
    as_json: JsonOpt = False,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="also write the run's report.html here (self-contained: open it in a browser)"),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="let --report replace an existing file")] = False,
):
    """One run in full: status, metrics summary, machine and cost, artifact URIs."""
    from stacks.runs.records import run_row
    from trainer.runfiles.readers import read_metrics

    if report is not None:  # the user's path, checked before anything is read
        check_output_file("--report", report, force=force, example="report.html")
    config, bucket = open_env(env, sets, lang, configured=False)
    code = find_run(bucket, run_id, lang)
    if report is not None:
        from trainer.runfiles.report_html import render_run

        report.write_bytes(render_run(bucket, code, run_id))
        console.print(f"report: {report.resolve()}", soft_wrap=True, markup=False)
    row = run_row(bucket, config, code, run_id)
    typed = read_metrics(bucket, code, run_id)
    data = run_document(bucket, code, run_id, row, typed.document if typed else None)
    if as_json:
        emit_json(data)
        return
    print_run(data, typed, run_id, code, env)


@runs_app.command("compare")
def compare(
    run_a: Annotated[str, typer.Argument(callback=checked_run_ids, help="a run id")],
    run_b: Annotated[str, typer.Argument(callback=checked_run_ids, help="another")],
    env: EnvOpt = "local",
    sets: SetOpt = None,
    as_json: JsonOpt = False,
):
    """Per-label F1 of two runs side by side, on the rows both scored (refused when those differ)."""
    from stacks.cli.run_console import print_table
    from stacks.runs.promotion import compare as compare_runs

    _, bucket = open_env(env, sets, None, configured=False)
    result = compare_runs(bucket, find_run(bucket, run_a, None), run_a, find_run(bucket, run_b, None), run_b)
    if as_json:
        emit_json(result)
        return
    table = Table(title=f"{run_a} (A) vs {run_b} (B): F1 on the same {result['n_rows']} {result['scored_rows']} rows")
    for col in ("label", "A", "B", "B - A", "support"):
        table.add_column(col, justify="left" if col == "label" else "right")

    def cell(v):
        return "" if v is None else f"{v:.3f}"

    for label, f in result["per_label"].items():
        delta = f["b"] - f["a"] if f["a"] is not None and f["b"] is not None else None
        table.add_row(label, cell(f["a"]), cell(f["b"]), "" if delta is None else f"{delta:+.3f}", str(f["support"]))
    macro, tfidf = result["macro_f1"], result["tfidf_macro_f1"]
    table.add_row("macro-F1", cell(macro["a"]), cell(macro["b"]), f"{macro['b'] - macro['a']:+.3f}", "")
    table.add_row("TF-IDF macro-F1", cell(tfidf["a"]), cell(tfidf["b"]), "", "")
    print_table(table)
