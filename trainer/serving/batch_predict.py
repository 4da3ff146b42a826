"""Classify a whole file: rows stream in batches from CSV, JSON Lines or Parquet, and each batch's
labels and per-label probabilities are written out beside the row's id before the next is read,
so memory stays bounded by the batch, not the file.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from trainer.data.tables import cell_text
from trainer.errors import DataError

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
ROW_COL = "row"  # the id column when the input has none: the row's 0-based position


def file_format(path: str | Path) -> str:
    suffixes = [s.lower() for s in Path(str(path)).suffixes]
    for suffix in reversed(suffixes):
        if suffix in FORMATS:
            return FORMATS[suffix]
    raise DataError(
        f"{path}: cannot tell the format from the name (want .csv, .jsonl or .parquet)",
        hint="name the file after its format, e.g. texts.csv",
    )


@dataclass
class Batch:
    ids: list
    texts: list[str]
    done: int  # progress units so far (rows for Parquet, bytes for CSV and JSON Lines)


def _rows_text(rows: list[int], most: int = 10) -> str:
    """1-based row numbers, the first `most` of them."""
    shown = ", ".join(str(n + 1) for n in rows[:most])
    return f"row{'s' if len(rows) > 1 else ''} {shown}" + (f" and {len(rows) - most} more" if len(rows) > most else "")


def _columns_error(path: str, want: str, what: str, columns: list[str], flag: str) -> DataError:
    return DataError(
        f"{path}: no {what} column {want!r} (columns: {', '.join(map(str, columns)) or 'none'})",
        hint=f"name it with {flag} COLUMN",
    )


class InputRows:
    """The input file's (id, text) rows in batches of `batch_rows`; `total` for the progress bar."""

    def __init__(self, path: Path, *, text_col: str, id_col: str | None, batch_rows: int, source: str | None = None):
        self.path, self.fmt = Path(path), file_format(path)
        self.source = source or str(path)  # the name messages give it (a gs:// input is read from a local copy)
        self.text_col, self.id_col, self.batch_rows = text_col, id_col, batch_rows
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            self._parquet = pq.ParquetFile(self.path)
            self.total, self.unit = self._parquet.metadata.num_rows, "rows"
        else:
            self.total, self.unit = self.path.stat().st_size, "bytes"
        self.id_name: str | None = None
        self.empty_rows: list[int] = []  # empty or null texts (0-based rows): classified, and counted

    def _ids_of(self, columns: list[str]) -> None:
        if self.text_col not in columns:
            raise _columns_error(self.source, self.text_col, "text", columns, "--text-col")
        if self.id_col and self.id_col not in columns:
            raise _columns_error(self.source, self.id_col, "id", columns, "--id-col")
        self.id_name = self.id_col or ("id" if "id" in columns else None)

    def __iter__(self) -> Iterator[Batch]:
        import pandas as pd

        if self.fmt == "parquet":
            self._ids_of(self._parquet.schema_arrow.names)
            self._text_column_type()
            cols = [self.text_col, *([self.id_name] if self.id_name else [])]
            seen = 0
            for record_batch in self._parquet.iter_batches(batch_size=self.batch_rows, columns=cols):
                frame = record_batch.to_pandas()
                yield self._batch(frame, seen, seen + len(frame))
                seen += len(frame)
            return
        with open(self.path, "rb") as fh:
            try:
                if self.fmt == "csv":
                    chunks = pd.read_csv(fh, chunksize=self.batch_rows, dtype=str, keep_default_na=False)
                else:
                    chunks = pd.read_json(fh, lines=True, chunksize=self.batch_rows, dtype=False)
                seen = 0
                for frame in chunks:
                    if self.id_name is None and seen == 0:
                        self._ids_of(list(frame.columns))
                    yield self._batch(frame, seen, fh.tell())
                    seen += len(frame)
            except UnicodeDecodeError:
                self._not_utf8()
                raise

    def _not_utf8(self) -> None:
        """The DataError that names the first byte that is not UTF-8, and its line (the file read again)."""
        from trainer.data.tables import check_text_stream

        with open(self.path, "rb") as fh:
            check_text_stream(fh, self.source)

    def _text_column_type(self) -> None:
        """A Parquet text column is typed: numbers, lists or structs there are not texts (data push refuses
        lists and structs too)."""
        import pyarrow as pa

        kind = self._parquet.schema_arrow.field(self.text_col).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
            raise DataError(
                f"{self.source}: the text column {self.text_col!r} holds {kind} values, not text (every row)",
                hint="name the column of texts with --text-col, or write this one as strings",
            )

    def _batch(self, frame, first: int, done: int) -> Batch:
        if self.id_name is None:
            self._ids_of(list(frame.columns))
        texts, refused = [], []
        for n, value in enumerate(map(_plain, frame[self.text_col]), first):
            try:  # a cell as data push reads one: strings, numbers as written, null as empty
                texts.append("" if isinstance(value, float) and np.isnan(value) else cell_text(value))
            except TypeError:
                refused.append((n, type(value).__name__))
            else:
                if not texts[-1].strip():
                    self.empty_rows.append(n)
        if refused:
            kinds = " or ".join(sorted({kind for _, kind in refused}))
            raise DataError(
                f"{self.source}: the text column {self.text_col!r} holds {kinds} values, not text, in "
                f"{_rows_text([n for n, _ in refused])}",
                hint=f"the {self.text_col!r} column must hold strings: fix those rows, or name another with --text-col",
            )
        ids = list(frame[self.id_name]) if self.id_name else list(range(first, first + len(frame)))
        return Batch(ids, texts, done)


class OutputRows:
    """Writes `<id>, labels, prob_<label>...` rows as they come, in the output's format."""

    def __init__(self, path: Path, *, id_name: str, labels: list[str], label_sep: str):
        self.path, self.fmt = Path(path), file_format(path)
        self.id_name, self.labels, self.sep = id_name, labels, label_sep
        self.columns = [id_name, "labels", *(f"prob_{label}" for label in labels)]
        self.rows = 0
        self._fh = self._csv = self._parquet = None

    def write(self, ids: list, chosen: list[list[str]], probs: np.ndarray) -> None:
        probs = np.round(probs.astype(float), 4)
        if self.fmt == "parquet":
            self._write_parquet(ids, chosen, probs)
        else:
            if self._fh is None:
                self._fh = open(self.path, "w", encoding="utf-8", newline="")
                if self.fmt == "csv":
                    self._csv = csv.writer(self._fh)
                    self._csv.writerow(self.columns)
            for row_id, labels, p in zip(ids, chosen, probs):
                values = [_plain(row_id), self.sep.join(labels), *p.tolist()]
                if self._csv is not None:
                    self._csv.writerow(values)
                else:
                    self._fh.write(json.dumps(dict(zip(self.columns, values)), ensure_ascii=False) + "\n")
        self.rows += len(ids)

    def _write_parquet(self, ids, chosen, probs) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        data = {self.id_name: [_plain(i) for i in ids], "labels": [self.sep.join(c) for c in chosen]}
        data.update({f"prob_{label}": probs[:, j] for j, label in enumerate(self.labels)})
        table = pa.table(data)
        if self._parquet is None:
            self._parquet = pq.ParquetWriter(self.path, table.schema)
        self._parquet.write_table(table.cast(self._parquet.schema))

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        if self._parquet is not None:
            self._parquet.close()


def _plain(value):
    """numpy scalars (from pandas/pyarrow) as the Python values json and csv write."""
    return value.item() if isinstance(value, np.generic) else value


def classify_file(
    rows: InputRows,
    output: Path,
    *,
    classify: Callable[[list[str]], tuple[list[list[str]], np.ndarray]],
    labels: list[str],
    label_sep: str,
    on_batch: Callable[[int, int], None] | None = None,
    at_once: int = 1,
) -> int:
    """Every row of `rows` through `classify(texts) -> (labels per row, probabilities)` into `output`
    -> rows written. `on_batch(done, rows)` after each batch (the progress bar). With `at_once` > 1, that many
    batches are classified at once on threads (`classify` must allow it), written in the input's order, and at
    most one more is read ahead: memory stays bounded as the file grows."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    def classified(batch: Batch):
        return classify(batch.texts) if batch.texts else ([], np.zeros((0, len(labels))))

    writer = None
    pool = ThreadPoolExecutor(at_once, thread_name_prefix="classify") if at_once > 1 else None
    pending: deque = deque()

    def write_first() -> None:
        nonlocal writer
        batch, result = pending.popleft()
        chosen, probs = result.result() if pool is not None else result
        if writer is None:
            writer = OutputRows(output, id_name=rows.id_name or ROW_COL, labels=labels, label_sep=label_sep)
        writer.write(batch.ids, chosen, probs)
        if on_batch:
            on_batch(batch.done, writer.rows)

    try:
        for batch in rows:
            pending.append((batch, pool.submit(classified, batch) if pool is not None else classified(batch)))
            while len(pending) > at_once:
                write_first()
        while pending:
            write_first()
    finally:
        if pool is not None:
            for _, result in pending:
                result.cancel()
            pool.shutdown(wait=True)
        if writer is not None:
            writer.close()
    if writer is None:  # an empty input still gets an output with its header
        writer = OutputRows(output, id_name=rows.id_name or ROW_COL, labels=labels, label_sep=label_sep)
        writer.write([], [], np.zeros((0, len(labels))))
        writer.close()
    return writer.rows
