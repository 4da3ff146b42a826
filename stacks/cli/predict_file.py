"""`trainctl predict LANG --input FILE --output FILE`: a whole file through the model, with a progress bar.

A gs:// input is downloaded to a temporary file first (disk, not memory); a gs:// output is written
locally and uploaded at the end. An output that already exists is never overwritten.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from stacks.cli.common import console, err_console
from stacks.errors import TrainstackError


class OutputExists(TrainstackError):
    """The output file is there already: predictions never replace a file."""


def _split_uri(uri: str):
    """(bucket, key) for a gs:// URI, (None, local path) otherwise (a path or file:// URI)."""
    from trainer.storage import open_bucket

    if uri.startswith("gs://"):
        name, _, key = uri[len("gs://") :].partition("/")
        return open_bucket(f"gs://{name}"), key
    return None, Path(uri[len("file://") :] if uri.startswith("file://") else uri).expanduser()


def _refused(output_uri: str) -> OutputExists:
    return OutputExists(
        f"{output_uri} exists: predictions never replace a file",
        hint="pick another --output name, or move the old file away",
    )


def check_files(input_uri: str, output_uri: str) -> None:
    """Everything about --input and --output that needs no model, before the model loads (seconds): the
    formats, an input that is there and not empty, an output that is not."""
    from stacks.cli.common import check_output_file
    from trainer.errors import DataError
    from trainer.serving.batch_predict import file_format

    out_bucket, out_where = _split_uri(output_uri)
    if not out_bucket:
        check_output_file(
            "--output",
            out_where,
            force=False,
            example="labels.csv",
            exists_hint="predictions never replace a file: pick another --output name, or move the old file away",
        )
    file_format(output_uri)
    file_format(input_uri)
    in_bucket, in_where = _split_uri(input_uri)
    if in_bucket and not in_bucket.exists(in_where):
        raise DataError(f"{input_uri} does not exist", hint="check the URI (gsutil ls)")
    if not in_bucket:
        _check_local_input(input_uri, in_where)
    if out_bucket and out_bucket.exists(out_where):
        raise _refused(output_uri)


def _check_local_input(input_uri: str, path: Path) -> None:
    from trainer.errors import DataError

    if not path.is_file():
        raise DataError(f"{input_uri} does not exist", hint="check the path")
    if path.stat().st_size == 0:
        raise DataError(
            f"{input_uri} is empty: nothing to classify",
            hint="pass the file with the texts (a CSV needs a header row naming its text column)",
        )


class LabelTally:
    """`classify` that also counts the rows given each label (one Counter update per batch; batches classified
    at once count one at a time)."""

    def __init__(self, classify, labels: list[str]):
        self.classify = classify
        self.counts = Counter(dict.fromkeys(labels, 0))
        self.no_label = 0
        self._lock = threading.Lock()

    def __call__(self, texts):
        chosen, probs = self.classify(texts)
        with self._lock:
            for labels in chosen:
                self.counts.update(labels)
                self.no_label += not labels
        return chosen, probs


def classify_file_cmd(
    model,
    input_uri: str,
    output_uri: str,
    *,
    text_col: str,
    id_col: str | None,
    batch_rows: int,
    label_sep: str,
    tmp: Path,
) -> dict:
    """`model` (trainer.serving.served_model.ServedModel) classifies every row of the input into the output
    -> {input, output, rows, labels: {label: rows given it}, no_label, seconds} (predict --json)."""
    from trainer.serving.batch_predict import InputRows, classify_file

    # Again: the model took seconds to load, and a file may have come meanwhile.
    check_files(input_uri, output_uri)
    in_bucket, in_where = _split_uri(input_uri)
    out_bucket, out_where = _split_uri(output_uri)
    refused = _refused(output_uri)
    if in_bucket:
        local_in = tmp / ("input" + "".join(Path(in_where).suffixes))
        in_bucket.download(in_where, local_in)
        _check_local_input(input_uri, local_in)
    else:
        local_in = in_where
    local_out = tmp / ("output" + "".join(Path(str(out_where)).suffixes)) if out_bucket else out_where
    rows = InputRows(local_in, text_col=text_col, id_col=id_col, batch_rows=batch_rows, source=input_uri)
    if not out_bucket:
        try:  # claimed before the first row is read: a file another process creates meanwhile is never replaced
            os.close(os.open(local_out, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            raise refused from None
    tally = LabelTally(model.predict, model.labels)
    started = time.monotonic()
    with Progress(
        TextColumn("classifying"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rows]} rows"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    ) as bar:
        task = bar.add_task("classify", total=rows.total, rows=0)
        try:
            written = classify_file(
                rows,
                local_out,
                classify=tally,
                labels=model.labels,
                label_sep=label_sep,
                on_batch=lambda done, n: bar.update(task, completed=done, rows=f"{n:,}"),
                at_once=model.use_cores(),
            )
        except BaseException:
            if not out_bucket:
                local_out.unlink(missing_ok=True)  # ours (claimed above): no half-written output left behind
            raise
    if out_bucket:
        if out_bucket.exists(out_where):  # written by someone else while this ran
            raise refused
        out_bucket.upload(local_out, out_where)
    seconds = time.monotonic() - started
    console.print(
        f"{written:,} rows classified by run {model.run_id} in {seconds:.1f}s "
        f"({written / max(seconds, 1e-9):,.0f} rows/s) -> {output_uri}",
        soft_wrap=True,
        markup=False,
    )
    warn_empty_texts(rows.empty_rows)
    return {
        "input": input_uri,
        "output": output_uri,
        "rows": written,
        "labels": dict(tally.counts),
        "no_label": tally.no_label,
        "empty_texts": len(rows.empty_rows),
        "seconds": round(seconds, 3),
    }


def warn_empty_texts(rows: list[int], most: int = 10) -> None:
    """Empty or null texts are classified (each gets the model's guess for no text), and said so."""
    if rows:
        shown = ", ".join(str(n + 1) for n in rows[:most]) + (" …" if len(rows) > most else "")
        err_console.print(
            f"warning: {len(rows):,} empty or null text{'s' if len(rows) > 1 else ''} (row {shown}, the first is 1): "
            "their labels are the model's guess for no text",
            soft_wrap=True,
            markup=False,
        )
