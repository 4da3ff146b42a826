"""Several languages followed in one view (TableView), then one summary table.

On a terminal: a live table, a row per language (state, stage, epoch, elapsed, last metric), with
notes and warnings printed above it. Without one: plain `[fr] ...` lines, each whole.
"""

from __future__ import annotations

import threading
import time

from rich.live import Live
from rich.markup import escape
from rich.table import Table

from stacks.cli.common import console, err_console
from stacks.cli.run_console import print_table


class LiveBoard:
    """The shared view; one LanguageReporter per language writes into it (from worker threads)."""

    def __init__(self, langs: list[str]):
        self.rows = {
            lang: {"state": "waiting", "stage": "", "epoch": "", "metric": "", "started": None, "ended": None}
            for lang in langs
        }
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> "LiveBoard":
        if console.is_terminal:
            self._live = Live(self._table(), console=console, refresh_per_second=4, transient=False)
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live:
            self._live.update(self._table())
            self._live.stop()

    def _table(self) -> Table:
        table = Table(title="runs", title_justify="left")
        for col in ("lang", "state", "stage", "epoch", "elapsed", "last metric"):
            table.add_column(col, no_wrap=col != "last metric")
        now = time.monotonic()
        for lang, row in self.rows.items():
            elapsed = f"{(row['ended'] or now) - row['started']:.0f}s" if row["started"] is not None else ""
            table.add_row(
                escape(lang), row["state"], escape(row["stage"]), row["epoch"], elapsed, escape(row["metric"])
            )
        return table

    def update(self, lang: str, **fields) -> None:
        with self._lock:
            self.rows[lang].update(fields)
            if self._live:
                self._live.update(self._table())

    def line(self, lang: str, text: str, *, style: str = "") -> None:
        """One whole line (above the live table on a terminal)."""
        with self._lock:
            body = f"[{style}]{escape(text)}[/]" if style else escape(text)
            console.print(f"[bold]\\[{escape(lang)}][/] {body}", soft_wrap=True)


class TableView(LiveBoard):
    """The view of a command running several languages (stacks/cli/run_view.py picks it)."""

    echo = None  # Terraform's own output would tear the table

    def reporter(self, lang: str) -> "LanguageReporter":
        return LanguageReporter(self, lang)

    def interrupted(self, stop, env: str, *, outlives: bool = True) -> None:
        """What a Ctrl-C left; `outlives`: the runs go on without this command (else they stopped with it)."""
        from stacks.runs.language_run import resume_command
        from stacks.runs.runflow import APPLYING, DESTROYING, FOLLOWING, MOVING, resume_hint, stopped_hint

        err_console.print(
            "interrupted: detached from every run; the runs keep going (a stack being applied "
            "or destroyed may be left part-way: destroy it)"
            if outlives
            else "interrupted: the runs stopped with this command, resumable (checkpoints kept)",
            soft_wrap=True,
        )
        for lang, (phase, run_id) in stop.where.items():  # what was applied and not yet torn down
            if phase in (APPLYING, FOLLOWING, DESTROYING) and not outlives:
                again = f"start it again: trainctl train {lang} --env {env}"
                hint = stopped_hint(lang, env, run_id) if run_id else again
                err_console.print(f"  {lang}: {hint}", soft_wrap=True, markup=False)
            elif phase == MOVING:
                hint = f"stopped while it moved, resumable: {resume_command(lang, env, run_id)}"
                err_console.print(f"  {lang}: {hint}", soft_wrap=True, markup=False)
            elif phase in (APPLYING, FOLLOWING, DESTROYING):
                err_console.print(f"  {lang}: {resume_hint(lang, env)}", soft_wrap=True, markup=False)

    def summary(self, results, config) -> None:
        summary(results, config)


class LanguageReporter:
    """runs.watch.Reporter for one language of the board."""

    def __init__(self, board: LiveBoard, lang: str):
        self.board, self.lang = board, lang
        board.update(lang, state="starting", started=time.monotonic())

    def info(self, message: str) -> None:
        self.board.line(self.lang, message)

    def warn(self, message: str) -> None:
        self.board.line(self.lang, f"warning: {message}", style="yellow")

    def log_line(self, line: str) -> None:
        if not console.is_terminal:  # on a terminal the table says it; a log keeps every line
            self.board.line(self.lang, line, style="dim")

    def progress(self, status) -> None:
        fields = {"state": status.state, "stage": status.stage, "epoch": status.position()}
        if status.last_epoch:  # the figures of the last epoch, from status.json
            fields["metric"] = "  ".join(f"{k} {v:.4f}" for k, v in status.last_epoch.items() if isinstance(v, float))
        self.board.update(self.lang, **fields)

    def finished(self, result) -> None:
        state = (
            result.outcome.status.state
            if result.outcome and result.outcome.status
            else ("started" if result.ok else "ERROR")
        )
        self.board.update(self.lang, state=state, ended=time.monotonic())
        if result.message:
            self.board.line(self.lang, f"error: {result.message}", style="red")
        if result.hint:
            self.board.line(self.lang, f"  → {result.hint}")
        if result.promotion:
            self.board.line(self.lang, result.promotion)


def summary(results, config) -> None:
    """One row per language: state, macro-F1 next to TF-IDF, duration, cost; then where the runs are."""
    from stacks.runs.records import run_row

    table = Table(title=f"{len(results)} language(s), env {config.env} (cost: estimated, USD)")
    for col in ("lang", "state", "run", "macro-F1", "TF-IDF", "Δ", "duration", "est. cost", "promoted"):
        table.add_column(col, no_wrap=True)
    for r in results:
        row = run_row(r.outcome.bucket, config, r.lang, r.outcome.run_id) if r.outcome else {}
        f1, tfidf = row.get("macro_f1"), row.get("tfidf_macro_f1")
        state = row.get("state") or ("ERROR" if not r.ok else "")
        dur = row.get("duration_s") if row.get("duration_s") is not None else r.duration_s
        cost = row.get("est_cost")
        table.add_row(
            escape(r.lang),
            state,
            row.get("run_id", ""),
            "" if f1 is None else f"{f1:.3f}",
            "" if tfidf is None else f"{tfidf:.3f}",
            f"{f1 - tfidf:+.3f}" if f1 is not None and tfidf is not None else "",
            f"{dur:.0f}s",
            "" if cost is None else f"${cost:.2f}",
            "yes" if r.promotion and r.promotion.startswith("promoted") else "",
        )
    print_table(table)
    for r in results:
        if not r.ok:
            err_console.print(f"[bold red]{escape(r.lang)}[/]: {escape(r.message or 'failed')}", soft_wrap=True)
            if r.outcome:
                err_console.print(f"  log: {r.outcome.url('log.txt')}", soft_wrap=True, markup=False)
            elif r.hint:
                err_console.print(f"  → {escape(r.hint)}", soft_wrap=True)
