"""Rows of a labelled-data file, whatever its format: CSV, JSON Lines or Parquet.

Each reader gives the column names and the rows as dicts of plain Python values
(CSV cells are strings; JSON and Parquet keep numbers, booleans, lists and
nulls), so trainer.data.labelled validates all formats with one set of rules and
messages. Line numbers in errors are the file's own (CSV: header = line 1;
JSON Lines: first record = line 1; Parquet: row 1 = first row).
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any, Iterator

from trainer.errors import DataError

# A text field may be a whole document: far beyond csv's default 131072-character limit.
CSV_FIELD_LIMIT = 2**31 - 1
SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
SUFFIX_OF = {fmt: suffix for suffix, fmt in SUFFIXES.items()}


@dataclass
class Table:
    """`rows` yields (line number, row) once, in file order."""

    fmt: str
    columns: list[str]
    rows: Iterator[tuple[int, dict[str, Any]]]


def format_of(name: str) -> str | None:
    """csv / jsonl / parquet from a file name, or None."""
    for suffix, fmt in SUFFIXES.items():
        if name.lower().endswith(suffix):
            return fmt
    return None


def _decode(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(
            f"{source} is not UTF-8 (invalid byte 0x{raw[exc.start]:02x} on line {line})",
            hint="re-encode it, e.g. `iconv -f latin1 -t utf-8 train.csv > train.utf8.csv`",
        ) from exc


def _csv(raw: bytes, source: str) -> Table:
    text = _decode(raw, source)
    csv.field_size_limit(CSV_FIELD_LIMIT)  # process-wide, and only ever raised: harmless to other readers
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        columns = list(reader.fieldnames or [])
    except csv.Error as exc:
        raise DataError(f"{source} is not valid CSV: {exc}", hint="check quoting around the header") from exc

    def rows():
        try:
            for i, row in enumerate(reader):
                yield i + 2, row
        except csv.Error as exc:
            raise DataError(f"{source} is not valid CSV: {exc}",
                            hint="check quoting around the reported line") from exc
    return Table("csv", columns, rows())


def _jsonl(raw: bytes, source: str) -> Table:
    records, columns = [], {}
    # split on \n only: str.splitlines() also breaks at U+2028/U+2029/U+0085, legal inside JSON strings
    for n, line in enumerate(_decode(raw, source).split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{source} line {n} is not valid JSON: {exc.msg} (column {exc.colno})",
                            hint="JSON Lines holds one JSON object per line") from exc
        if not isinstance(record, dict):
            raise DataError(f"{source} line {n} is a JSON {type(record).__name__}, not an object",
                            hint='each line must be an object such as {"text": "...", "labels": ["a"]}')
        columns.update(dict.fromkeys(record))
        records.append((n, record))
    return Table("jsonl", list(columns), iter(records))


def _parquet(raw: bytes, source: str) -> Table:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:  # a dependency of the trainer; only a broken install lacks it
        raise DataError(f"{source}: reading Parquet needs pyarrow", hint="pip install pyarrow") from exc
    try:
        table = pq.read_table(io.BytesIO(raw))
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{source} is not a readable Parquet file: {exc}",
                        hint="write it with pandas.DataFrame.to_parquet or pyarrow.parquet.write_table") from exc

    def rows():
        n = 0
        for batch in table.to_batches(max_chunksize=10_000):  # bounded Python objects at a time
            for row in batch.to_pylist():
                n += 1
                yield n, row
    return Table("parquet", list(table.column_names), rows())


READERS = {"csv": _csv, "jsonl": _jsonl, "parquet": _parquet}


def read_table(raw: bytes, fmt: str, source: str) -> Table:
    """The columns and rows of `raw` in format `fmt` (csv, jsonl or parquet)."""
    if not raw.strip():
        raise DataError(f"{source} is empty",
                        hint="add labelled rows (CSV: with a header row), then `trainctl data push`")
    return READERS[fmt](raw, source)


def cell_text(value: Any) -> str:
    """A cell as text: strings as they are, numbers as written, null as empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # Parquet stores an int column with nulls as float: 1.0 is the label 1
    if isinstance(value, (int, float)):
        return str(value)
    raise TypeError(type(value).__name__)


def label_list(value: Any, sep: str) -> list[str] | None:
    """Labels of one cell: a list (JSON / Parquet), a JSON list written as text, or text split on `sep`.

    None when the value has no sensible reading (a JSON object, a nested list)."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            try:
                parsed = json.loads(stripped)
            except json.JSONDecodeError:
                parsed = None
            if isinstance(parsed, list):
                value = parsed
        if isinstance(value, str):
            return [t.strip() for t in value.split(sep) if t.strip()]
    if isinstance(value, (list, tuple)):
        try:
            return [t for t in (cell_text(v).strip() for v in value) if t]
        except TypeError:
            return None
    try:
        text = cell_text(value).strip()
    except TypeError:
        return None
    return [text] if text else []


TRUE_CELLS = {"1", "1.0", "true", "yes", "y", "t"}
FALSE_CELLS = {"0", "0.0", "false", "no", "n", "f", "", "none", "null", "nan"}


def flag(value: Any) -> bool | None:
    """A 0/1 label-column cell as a bool; None when it is neither."""
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    if isinstance(value, (int, float)):
        return True if value == 1 else False if value == 0 or value != value else None  # NaN: empty cell
    if isinstance(value, str):
        text = value.strip().lower()
        return True if text in TRUE_CELLS else False if text in FALSE_CELLS else None
    return None
