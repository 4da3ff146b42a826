"""Rows of a labelled-data file, whatever its format: CSV, JSON Lines or Parquet.

Each reader gives the column names and the rows as dicts of plain Python values
(CSV cells are strings; JSON and Parquet keep numbers, booleans, lists and
nulls), so trainer.data.labelled validates all formats with one set of rules and
messages. Line numbers in errors are the file's own (CSV: header = line 1;
JSON Lines: first record = line 1; Parquet: row 1 = first row).
"""
from __future__ import annotations

import codecs
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


def line_of(raw: bytes, pos: int) -> int:
    """The 1-based line of byte `pos` of `raw`."""
    return raw.count(b"\n", 0, pos) + 1


def nul_error(source: str, line: int) -> DataError:
    return DataError(f"{source} line {line} holds a NUL byte: a binary file, or not UTF-8 text",
                     hint="remove the NUL bytes, or re-encode the file as UTF-8 "
                          "(UTF-16: `iconv -f utf-16 -t utf-8 FILE`)")


def decode_text(raw: bytes, source: str) -> str:
    """`raw` as UTF-8 text (a BOM dropped); NUL bytes and undecodable bytes are errors naming their line."""
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise DataError(f"{source} is UTF-16, not UTF-8",
                        hint="re-encode it, e.g. `iconv -f utf-16 -t utf-8 FILE > FILE.utf8`, and push that")
    nul = raw.find(b"\0")
    if nul >= 0:  # csv and the tokenizers would carry it along silently; binary files and UTF-16 have them
        raise nul_error(source, line_of(raw, nul))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{source} is not UTF-8 (invalid byte 0x{raw[exc.start]:02x} on line {line_of(raw, exc.start)})",
            hint="re-encode it, e.g. `iconv -f latin1 -t utf-8 train.csv > train.utf8.csv`",
        ) from exc


def _duplicated(names: list[str], *, blank_ok: bool = True) -> str | None:
    """The first name that occurs twice (blank ones, as trailing commas leave in a header, are no columns)."""
    seen = set()
    for name in names:
        if name in seen and (name.strip() or not blank_ok):
            return name
        seen.add(name)
    return None


def _csv_error(exc: csv.Error, source: str, start: int, now: int) -> DataError:
    """A csv.Error in words: the record began on line `start`, the reader stopped on line `now`."""
    doubled = 'a quote inside a quoted field is written twice: "il a dit ""oui"""'
    if "unexpected end of data" in str(exc):
        return DataError(f"{source} line {start}: a quote opened on this line is never closed "
                         "(the field would run to the end of the file)", hint=f"close the quote; {doubled}")
    if "expected after" in str(exc):
        where = f"line {now}" if now == start else f"line {now} (in the quoted field opened on line {start})"
        return DataError(f"{source} {where}: a quote ends a quoted field with text right after it",
                         hint=f"{doubled}; or close the quote opened on line {start} where the field ends")
    return DataError(f"{source} line {start} is not valid CSV: {exc}", hint="check the quoting of that line")


def _field_count_error(source: str, line: int, row: list[str], columns: list[str]) -> DataError:
    fields = f"{len(row)} field{'s' if len(row) != 1 else ''}"
    return DataError(f"{source} line {line} has {fields} where the header has {len(columns)} "
                     f"({', '.join(columns)})",
                     hint='quote a field that holds a comma ("bonjour, madame"); every row has one field per '
                          "header column, empty ones included (x,,)")


def _blank(row: list[str]) -> bool:
    """An empty line, or one of spaces only: no record."""
    return len(row) <= 1 and not "".join(row).strip()


def _csv(raw: bytes, source: str) -> Table:
    text = decode_text(raw, source)
    csv.field_size_limit(CSV_FIELD_LIMIT)  # process-wide, and only ever raised: harmless to other readers
    # strict: an unclosed quote or text after a closing quote is an error, not a field that swallows rows
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        columns = next((row for row in reader if not _blank(row)), [])
    except csv.Error as exc:
        raise _csv_error(exc, source, 1, reader.line_num) from exc
    if (twice := _duplicated(columns)) is not None:
        raise DataError(f"{source} line {reader.line_num}: column {twice!r} appears twice in the header",
                        hint="rename or remove one of them: each column is read by its name")

    def rows():
        start = reader.line_num + 1
        try:
            for row in reader:
                if not _blank(row):
                    if len(row) != len(columns):
                        raise _field_count_error(source, start, row, columns)
                    yield start, dict(zip(columns, row))
                start = reader.line_num + 1
        except csv.Error as exc:
            raise _csv_error(exc, source, start, reader.line_num) from exc
    return Table("csv", columns, rows())


class _DuplicateKey(ValueError):
    pass


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) != len(pairs):  # json.loads would keep the last value silently
        raise _DuplicateKey(_duplicated([key for key, _ in pairs], blank_ok=False))
    return record


def _jsonl(raw: bytes, source: str) -> Table:
    records, columns = [], {}
    # split on \n only: str.splitlines() also breaks at U+2028/U+2029/U+0085, legal inside JSON strings
    for n, line in enumerate(decode_text(raw, source).split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_refuse_duplicate_keys)
        except _DuplicateKey as exc:
            raise DataError(f"{source} line {n}: key {exc.args[0]!r} appears twice in one object",
                            hint="keep one: JSON readers differ on which value wins") from None
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
        names = pq.read_schema(io.BytesIO(raw)).names
        if (twice := _duplicated(names)) is not None:
            raise DataError(f"{source}: column {twice!r} appears twice",
                            hint="rename or remove one of them: each column is read by its name")
        table = pq.read_table(io.BytesIO(raw))
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{source} is not a readable Parquet file: {exc}",
                        hint="write it with pandas.DataFrame.to_parquet or pyarrow.parquet.write_table") from exc

    def rows():
        n = 0
        try:
            for batch in table.to_batches(max_chunksize=10_000):  # bounded Python objects at a time
                for row in batch.to_pylist():
                    n += 1
                    yield n, row
        except (pa.ArrowException, UnicodeDecodeError) as exc:  # a damaged page, or a string column not UTF-8
            raise DataError(f"{source} row {n + 1} cannot be read: {exc}",
                            hint="write the file again (pandas.DataFrame.to_parquet), with UTF-8 strings",
                            ) from exc
    return Table("parquet", list(table.column_names), rows())


READERS = {"csv": _csv, "jsonl": _jsonl, "parquet": _parquet}


def read_table(raw: bytes, fmt: str, source: str) -> Table:
    """The columns and rows of `raw` in format `fmt` (csv, jsonl or parquet)."""
    if not raw.strip():
        raise DataError(f"{source} is empty",
                        hint="add labelled rows (CSV: with a header row), then `trainctl data push`")
    return READERS[fmt](raw, source)


SEPARATORS = {"\t": "tab", ";": "semicolon", "|": "pipe"}


def separator_hint(columns: list[str]) -> str | None:
    """A header read as one column that holds another separator: say so, the file is not comma-separated."""
    if len(columns) != 1:
        return None
    found = next((name for sep, name in SEPARATORS.items() if sep in columns[0]), None)
    if found is None:
        return None
    return (f"the header reads as one column: the file looks {found}-separated, and CSV here is "
            "comma-separated; convert it, e.g. pandas.read_csv(path, sep=None, engine='python')"
            ".to_csv('train.csv', index=False)")


def refuse_nul(values, source: str, n: int, col: str) -> None:
    """A NUL in a cell (a JSON \\u0000, a Parquet string): an error, as the same byte in a CSV is."""
    if any("\0" in v for v in values):
        raise DataError(f"{source} line {n}: the {col!r} value holds a NUL character",
                        hint="remove it: a NUL in a text is a sign of binary data or a broken export")


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
