"""Console output of a run: log lines, a progress bar of stage and epoch, tables."""

from __future__ import annotations

from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from stacks.cli.common import console
from trainer.runfiles.metrics_file import RunMetrics
from trainer.runfiles.status_file import RunStatus


class ConsoleReporter:
    """Implements runs.watch.Reporter; the bar only shows on a terminal."""

    def __init__(self):
        self._progress: Progress | None = None
        self._task = None

    def __enter__(self):
        if console.is_terminal:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[epochs]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("starting", total=1, epochs="")
        return self

    def __exit__(self, *exc):
        if self._progress:
            self._progress.stop()

    def info(self, message: str) -> None:
        console.print(f"[cyan]›[/] {escape(message)}", soft_wrap=True)

    def warn(self, message: str) -> None:
        console.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)

    def log_line(self, line: str) -> None:
        console.print(f"[dim]{escape(line)}[/]", soft_wrap=True)

    def progress(self, status: RunStatus) -> None:
        if not self._progress:
            return
        # inside a long epoch the bar moves by batches (progress), not only at epoch ends
        p = status.progress or {}
        # the epoch running (1-based) less the share of it still to go
        done = p["epoch"] - 1 + p["batch"] / max(p["batches"], 1) if "epoch" in p else status.epoch
        self._progress.update(
            self._task,
            description=f"{status.state.lower()} · {status.stage}",
            completed=done,
            total=max(status.epochs, 1),
            epochs=status.position(),
        )


def metrics_table(metrics: RunMetrics) -> Table:
    scored, model = metrics.scored_rows or "valid", metrics.model
    table = Table(title=f"run {metrics.run_id} ({metrics.lang}) — {scored} metrics")
    for col in ("label", "precision", "recall", "f1", "support", "threshold"):
        table.add_column(col, justify="left" if col == "label" else "right")
    for label, m in model.per_label.items():
        thr = "argmax" if m.threshold is None else f"{m.threshold:.2f}"
        table.add_row(label, f"{m.precision:.3f}", f"{m.recall:.3f}", f"{m.f1:.3f}", str(m.support), thr)
    tfidf = metrics.baseline_tfidf
    vs_tfidf = (
        f"TF-IDF baseline macro-F1 {tfidf.macro_f1:.3f} (model {model.macro_f1 - tfidf.macro_f1:+.3f}) · "
        if tfidf
        else ""
    )
    majority = metrics.baseline.macro_f1 if metrics.baseline else float("nan")
    kept = ""
    if metrics.blended and metrics.classifier is not None:
        kept = f"kept: {metrics.kept_name} (classifier alone macro-F1 {metrics.classifier.macro_f1:.3f}) · "
    table.caption = (
        f"{kept}macro-F1 {model.macro_f1:.3f} · micro-F1 {_num(model.micro_f1)} · "
        f"accuracy {_num(model.accuracy)} · {vs_tfidf}majority baseline macro-F1 "
        f"{majority:.3f} · {metrics.n_train} train / {metrics.n_valid} valid"
        + (f" / {metrics.n_test} test" if metrics.n_test else "")
        + " rows"
        + (f" · {metrics.duration_s:.0f}s" if metrics.duration_s is not None else "")
        + _base_lm_note(metrics.document.get("base_lm", "unrecorded"))
        + _bidirectional_note(metrics)
    )
    return table


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _bidirectional_note(metrics: RunMetrics) -> str:
    """The backward model's and the ensemble's macro-F1 (the table above is the forward model's)."""
    if metrics.ensemble is None:
        return ""
    return (
        f" · table: forward model; backward macro-F1 {metrics.backward.macro_f1:.3f}, "
        f"forward+backward ensemble {metrics.ensemble.macro_f1:.3f}"
    )


def _base_lm_note(base: dict | str | None) -> str:
    if base == "unrecorded":  # metrics from before base LMs were recorded
        return ""
    if base is None:
        return " · no base LM: expect weak transfer"
    tokens = f"{base['tokens']:,} tokens" if base.get("tokens") is not None else "tokens unknown"
    return f" · base LM {base['id']} ({tokens})" + (
        " · small base LM: expect weak transfer" if base.get("small") else ""
    )


def plain(cell) -> str:
    """A table cell without its markup or style."""
    return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


def print_table(table: Table) -> None:
    """A rich table on a terminal; elsewhere the title, then tab-separated rows (header first),
    then the caption, each on one line: the same cells, nothing truncated, wrapped or coloured."""
    if console.is_terminal:
        console.print(table)
        return
    lines = [plain(table.title)] if table.title else []
    lines.append("\t".join(plain(c.header) for c in table.columns))
    lines += ["\t".join(plain(v) for v in row) for row in zip(*(list(c.cells) for c in table.columns))]
    if table.caption:
        lines.append(plain(table.caption))
    out = console.file  # stdout, or stderr while --json keeps stdout for the document (common.json_on_stdout)
    out.write("\n".join(lines) + "\n")
    out.flush()
