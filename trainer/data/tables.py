"""Rows of a labelled-data file, whatever its format: CSV, JSON Lines or Parquet.

Each reader gives the column names and the rows as dicts of plain Python values
(CSV cells are strings; JSON and Parquet keep numbers, booleans, lists and
nulls), so trainer.data.labelled validates all formats with one set of rules and
messages. Line numbers in errors are the file's own (CSV: header = line 1;
JSON Lines: first record = line 1; Parquet: row 1 = first row).

A file comes as its bytes (the trainer) or as a seekable stream (`data push`, whatever the file's size),
read a chunk at a time, with the same errors in the same order. Size: over 400 lines because each format's
two readers sit side by side, sharing their rules.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterable, Iterator

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


UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
TEXT_CHUNK = 1 << 18  # bytes read at a time from a stream
PARQUET_BATCH = 10_000  # Parquet rows made Python objects at a time


def nul_error(source: str, line: int) -> DataError:
    return DataError(
        f"{source} line {line} holds a NUL byte: a binary file, or not UTF-8 text",
        hint="remove the NUL bytes, or re-encode the file as UTF-8 (UTF-16: `iconv -f utf-16 -t utf-8 FILE`)",
    )


def _utf16_error(source: str) -> DataError:
    return DataError(
        f"{source} is UTF-16, not UTF-8",
        hint="re-encode it, e.g. `iconv -f utf-16 -t utf-8 FILE > FILE.utf8`, and push that",
    )


def _not_utf8_error(source: str, byte: int, line: int) -> DataError:
    return DataError(
        f"{source} is not UTF-8 (invalid byte 0x{byte:02x} on line {line})",
        hint=f"convert it to UTF-8, e.g. `iconv -f latin1 -t utf-8 {source} > {utf8_name(source)}` "
        "(Latin-1 or Windows-1252: -f cp1252)",
    )


def utf8_name(source: str) -> str:
    """Where a converted copy of `source` goes: train.csv -> train.utf8.csv."""
    stem, dot, suffix = source.rpartition(".")
    return f"{stem}.utf8.{suffix}" if dot and "/" not in suffix else f"{source}.utf8"


def decode_text(raw: bytes, source: str) -> str:
    """`raw` as UTF-8 text (a BOM dropped); NUL bytes and undecodable bytes are errors naming their line."""
    if raw.startswith(UTF16_BOMS):
        raise _utf16_error(source)
    nul = raw.find(b"\0")
    if nul >= 0:  # csv and the tokenizers would carry it along silently; binary files and UTF-16 have them
        raise nul_error(source, line_of(raw, nul))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        at = exc.start + (len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0)  # counted after the BOM
        raise _not_utf8_error(source, raw[at], line_of(raw, at)) from exc


def check_text_stream(stream: BinaryIO, source: str) -> None:
    """decode_text's checks on a seekable stream, a chunk at a time, with its errors (a NUL byte before any
    other); the stream is left at its start."""
    stream.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines, bad, chunk = 0, None, stream.read(TEXT_CHUNK)  # bad: (byte, line) of the first byte not UTF-8
    if chunk.startswith(UTF16_BOMS):
        raise _utf16_error(source)
    while True:
        if (nul := chunk.find(b"\0")) >= 0:
            raise nul_error(source, lines + chunk.count(b"\n", 0, nul) + 1)
        if bad is None:
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:  # exc.object: this chunk after a character cut at the last one's end
                bad = (exc.object[exc.start], lines + exc.object.count(b"\n", 0, exc.start) + 1)
        if not chunk:
            break
        lines += chunk.count(b"\n")
        chunk = stream.read(TEXT_CHUNK)
    stream.seek(0)
    if bad is not None:
        raise _not_utf8_error(source, *bad)


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
        return DataError(
            f"{source} line {start}: a quote opened on this line is never closed "
            "(the field would run to the end of the file)",
            hint=f"close the quote; {doubled}",
        )
    if "expected after" in str(exc):
        where = f"line {now}" if now == start else f"line {now} (in the quoted field opened on line {start})"
        return DataError(
            f"{source} {where}: a quote ends a quoted field with text right after it",
            hint=f"{doubled}; or close the quote opened on line {start} where the field ends",
        )
    return DataError(f"{source} line {start} is not valid CSV: {exc}", hint="check the quoting of that line")


def _field_count_error(source: str, line: int, row: list[str], columns: list[str]) -> DataError:
    fields = f"{len(row)} field{'s' if len(row) != 1 else ''}"
    return DataError(
        f"{source} line {line} has {fields} where the header has {len(columns)} ({', '.join(columns)})",
        hint='quote a field that holds a comma ("bonjour, madame"); every row has one field per '
        "header column, empty ones included (x,,)",
    )


def _blank(row: list[str]) -> bool:
    """An empty line, or one of spaces only: no record."""
    return len(row) <= 1 and not "".join(row).strip()


def _csv(raw: bytes, source: str) -> Table:
    return _csv_table(io.StringIO(decode_text(raw, source), newline=""), source)


def _csv_stream(stream: BinaryIO, source: str) -> Table:
    check_text_stream(stream, source)
    # newline="": lines split at \r\n, \r and \n as io.StringIO(newline="") splits them, for csv to read
    return _csv_table(io.TextIOWrapper(stream, encoding="utf-8-sig", newline=""), source)


def _csv_table(lines: Iterable[str], source: str) -> Table:
    csv.field_size_limit(CSV_FIELD_LIMIT)  # process-wide, and only ever raised: harmless to other readers
    # strict: an unclosed quote or text after a closing quote is an error, not a field that swallows rows
    reader = csv.reader(lines, strict=True)
    try:
        columns = next((row for row in reader if not _blank(row)), [])
    except csv.Error as exc:
        raise _csv_error(exc, source, 1, reader.line_num) from exc
    if (twice := _duplicated(columns)) is not None:
        raise DataError(
            f"{source} line {reader.line_num}: column {twice!r} appears twice in the header",
            hint="rename or remove one of them: each column is read by its name",
        )

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


def _json_record(line: str, n: int, source: str) -> dict[str, Any] | None:
    """Line `n` of a JSON Lines file (its \n gone) as an object; None for a blank line."""
    line = line.removesuffix("\r")
    if not line.strip():
        return None
    try:
        record = json.loads(line, object_pairs_hook=_refuse_duplicate_keys)
    except _DuplicateKey as exc:
        raise DataError(
            f"{source} line {n}: key {exc.args[0]!r} appears twice in one object",
            hint="keep one: JSON readers differ on which value wins",
        ) from None
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{source} line {n} is not valid JSON: {exc.msg} (column {exc.colno})",
            hint="JSON Lines holds one JSON object per line",
        ) from exc
    if not isinstance(record, dict):
        raise DataError(
            f"{source} line {n} is a JSON {type(record).__name__}, not an object",
            hint='each line must be an object such as {"text": "...", "labels": ["a"]}',
        )
    return record


def _jsonl(raw: bytes, source: str) -> Table:
    records, columns = [], {}
    # split on \n only: str.splitlines() also breaks at U+2028/U+2029/U+0085, legal inside JSON strings
    for n, line in enumerate(decode_text(raw, source).split("\n"), start=1):
        if (record := _json_record(line, n, source)) is not None:
            columns.update(dict.fromkeys(record))
            records.append((n, record))
    return Table("jsonl", list(columns), iter(records))


def _jsonl_stream(stream: BinaryIO, source: str) -> Table:
    check_text_stream(stream, source)
    columns: dict[str, None] = {}
    for _, record in _json_lines(stream, source):  # read twice: the columns, and any bad line, before a row
        columns.update(dict.fromkeys(record))
    return Table("jsonl", list(columns), _json_lines(stream, source))


def _json_lines(stream: BinaryIO, source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    stream.seek(0)
    for n, line in enumerate(stream, start=1):  # a binary stream's lines end at \n only
        if (
            record := _json_record(line.decode("utf-8-sig" if n == 1 else "utf-8").removesuffix("\n"), n, source)
        ) is not None:
            yield n, record


def _pyarrow(source: str):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:  # a dependency of the trainer; only a broken install lacks it
        raise DataError(f"{source}: reading Parquet needs pyarrow", hint="pip install pyarrow") from exc
    return pa, pq


def _parquet_columns(names: list[str], source: str) -> list[str]:
    if (twice := _duplicated(names)) is not None:
        raise DataError(
            f"{source}: column {twice!r} appears twice",
            hint="rename or remove one of them: each column is read by its name",
        )
    return list(names)


def _unreadable_parquet(source: str, exc: Exception) -> DataError:
    return DataError(
        f"{source} is not a readable Parquet file: {exc}",
        hint="write it with pandas.DataFrame.to_parquet or pyarrow.parquet.write_table",
    )


def _parquet(raw: bytes, source: str) -> Table:
    pa, pq = _pyarrow(source)
    try:
        _parquet_columns(pq.read_schema(io.BytesIO(raw)).names, source)
        table = pq.read_table(io.BytesIO(raw))
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # UnicodeDecodeError: a column name's bytes
        raise _unreadable_parquet(source, exc) from exc
    return Table(
        "parquet", list(table.column_names), _parquet_rows(table.to_batches(max_chunksize=PARQUET_BATCH), source)
    )


def _parquet_stream(stream: BinaryIO, source: str) -> Table:
    pa, pq = _pyarrow(source)
    try:
        parquet = pq.ParquetFile(stream)
        columns = _parquet_columns(parquet.schema_arrow.names, source)
        for group in range(parquet.num_row_groups):  # a damaged page said now, as read_table says it
            parquet.read_row_group(group)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # UnicodeDecodeError: a column name's bytes
        raise _unreadable_parquet(source, exc) from exc
    # a row group at a time (iter_batches reads some damaged files otherwise than read_table does)
    batches = (
        batch
        for group in range(parquet.num_row_groups)
        for batch in parquet.read_row_group(group).to_batches(max_chunksize=PARQUET_BATCH)
    )
    return Table("parquet", columns, _parquet_rows(batches, source))


def _parquet_rows(batches: Iterable, source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    pa, _ = _pyarrow(source)
    n = 0
    try:
        for batch in batches:  # bounded Python objects at a time
            for row in batch.to_pylist():
                n += 1
                yield n, row
    except (pa.ArrowException, UnicodeDecodeError) as exc:  # a damaged page, or a string column not UTF-8
        raise DataError(
            f"{source} row {n + 1} cannot be read: {exc}",
            hint="write the file again (pandas.DataFrame.to_parquet), with UTF-8 strings",
        ) from exc


READERS = {"csv": _csv, "jsonl": _jsonl, "parquet": _parquet}
STREAM_READERS = {"csv": _csv_stream, "jsonl": _jsonl_stream, "parquet": _parquet_stream}


def _blank_stream(stream: BinaryIO) -> bool:
    """Nothing but whitespace (as bytes.strip() sees it) in the stream, read until its first other byte."""
    stream.seek(0)
    while chunk := stream.read(TEXT_CHUNK):
        if chunk.strip():
            break
    stream.seek(0)
    return not chunk


def read_table(raw: bytes | BinaryIO, fmt: str, source: str) -> Table:
    """The columns and rows of a file in format `fmt` (csv, jsonl or parquet): `raw`, its bytes, or a seekable
    binary stream of them, read a chunk at a time so that no file is held whole (read from its start, through
    to its end, and maybe closed)."""
    bytes_given = isinstance(raw, (bytes, bytearray))
    blank = not raw.strip() if bytes_given else _blank_stream(raw)
    if blank:
        raise DataError(
            f"{source} is empty", hint="add labelled rows (CSV: with a header row), then `trainctl data push`"
        )
    return (READERS if bytes_given else STREAM_READERS)[fmt](raw, source)


SEPARATORS = {"\t": "tab", ";": "semicolon", "|": "pipe"}


def separator_hint(columns: list[str]) -> str | None:
    """A header read as one column that holds another separator: say so, the file is not comma-separated."""
    if len(columns) != 1:
        return None
    found = next((name for sep, name in SEPARATORS.items() if sep in columns[0]), None)
    if found is None:
        return None
    return (
        f"the header reads as one column: the file looks {found}-separated, and CSV here is "
        "comma-separated; convert it, e.g. pandas.read_csv(path, sep=None, engine='python')"
        ".to_csv('train.csv', index=False)"
    )


def refuse_nul(values, source: str, n: int, col: str) -> None:
    """A NUL in a cell (a JSON \\u0000, a Parquet string): an error, as the same byte in a CSV is."""
    if any("\0" in v for v in values):
        raise DataError(
            f"{source} line {n}: the {col!r} value holds a NUL character",
            hint="remove it: a NUL in a text is a sign of binary data or a broken export",
        )


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
