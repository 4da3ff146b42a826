"""Texts without labels: the base LM's corpus (`<lang>/data/corpus/*.txt[.gz]`, one text per line) and the
unlabelled texts (`<lang>/data/unlabelled.*`: .txt[.gz], or a table's text column). Read whole (unlabelled
texts) or only checked a chunk at a time (`data push` on a corpus); either way a file that is not gzip (.gz),
cut short, binary or not UTF-8 is a DataError naming the file and the line. `data push` counts the unlabelled
texts of a stream, never holding the file whole."""

from __future__ import annotations

import codecs
import gzip
import io
import zlib
from typing import BinaryIO, Iterator

from trainer.data.tables import (
    Table,
    cell_text,
    check_text_stream,
    decode_text,
    format_of,
    nul_error,
    read_table,
    refuse_nul,
    separator_hint,
)
from trainer.errors import DataError

CORPUS_SUFFIXES = (".txt", ".txt.gz")
GZIP_MAGIC = b"\x1f\x8b"
TEXT_CHUNK = 1 << 20  # bytes read at a time when a text file is only checked, not kept


def _not_gzip(source: str, head: bytes) -> DataError:
    return DataError(
        f"{source} is not a readable gzip file: it starts with {head[:8]!r}, not gzip's 1f 8b",
        hint="gzip it (`gzip FILE.txt`), or name it .txt if it is plain text",
    )


def _damaged_gzip(source: str, exc: Exception) -> DataError:
    why = str(exc) or type(exc).__name__
    return DataError(
        f"{source} is not a readable gzip file (cut short or damaged): {why}",
        hint="make it again with gzip (a copy cut short?), or push it uncompressed as .txt",
    )


def gunzip(raw: bytes, source: str) -> bytes:
    """The content of a .gz file; not gzip, cut short or damaged: a DataError."""
    if not raw.startswith(GZIP_MAGIC):
        raise _not_gzip(source, raw)
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise _damaged_gzip(source, exc) from exc


def text_lines(raw: bytes, name: str, source: str) -> list[str]:
    """The non-empty lines of a .txt or .txt.gz file, stripped; lines end at \\n, \\r or \\r\\n only, as the
    corpus reader's do (str.splitlines also breaks at U+2028 ...)."""
    text = decode_text(gunzip(raw, source) if name.lower().endswith(".gz") else raw, source)
    return [t for t in (line.strip() for line in io.StringIO(text, newline=None)) if t]


def check_text_file(stream, name: str, source: str) -> int:
    """Read a corpus or unlabelled .txt / .txt.gz stream through, a chunk at a time (corpora are large) -> its
    lines. Not gzip (.gz), cut short, NUL bytes or not UTF-8: a DataError naming the line."""
    if name.lower().endswith(".gz"):
        head = stream.read(2)
        if head != GZIP_MAGIC:
            raise _not_gzip(source, head)
        stream.seek(0)
        stream = gzip.GzipFile(fileobj=stream)
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before, last = 0, b"\n"
    try:
        while chunk := stream.read(TEXT_CHUNK):
            _check_text_chunk(chunk, decoder, lines_before, source)
            lines_before += chunk.count(b"\n")
            last = chunk[-1:]
        _check_text_chunk(b"", decoder, lines_before, source, final=True)
    except (OSError, EOFError, zlib.error) as exc:
        raise _damaged_gzip(source, exc) from exc
    return lines_before + (last != b"\n")  # a last line without its \n is a line too


def _check_text_chunk(chunk: bytes, decoder, lines_before: int, source: str, final: bool = False) -> None:
    pending = len(decoder.getstate()[0])  # a character cut at the end of the previous chunk
    try:
        decoder.decode(chunk, final=final)
    except UnicodeDecodeError as exc:
        line = lines_before + chunk.count(b"\n", 0, max(exc.start - pending, 0)) + 1
        raise DataError(
            f"{source} is not UTF-8 (invalid byte on line {line})",
            hint="re-encode it, e.g. `iconv -f latin1 -t utf-8 FILE > FILE.utf8`",
        ) from exc
    if (nul := chunk.find(b"\0")) >= 0:
        raise nul_error(source, lines_before + chunk.count(b"\n", 0, nul) + 1)


def unlabelled_texts(raw: bytes, name: str, *, text_col: str, source: str) -> list[str]:
    """The non-empty texts of an unlabelled file: one per line (.txt, .txt.gz), or a table's text column."""
    if name.lower().endswith(CORPUS_SUFFIXES):
        return text_lines(raw, name, source)
    return [text for text in _column_texts(read_table(raw, format_of(name), source), text_col, source) if text]


def count_unlabelled_texts(stream: BinaryIO, name: str, *, text_col: str, source: str) -> int:
    """How many texts unlabelled_texts finds, with its errors, a seekable stream of the file read a chunk at a
    time (`data push`, whatever the file's size)."""
    if not name.lower().endswith(CORPUS_SUFFIXES):
        return sum(1 for text in _column_texts(read_table(stream, format_of(name), source), text_col, source) if text)
    if name.lower().endswith(".gz"):
        stream = _gunzipped(stream, source)
    check_text_stream(stream, source)
    # newline=None: lines end at \n, \r or \r\n, as text_lines' do
    return sum(1 for line in io.TextIOWrapper(stream, encoding="utf-8-sig", newline=None) if line.strip())


def _gunzipped(stream: BinaryIO, source: str) -> gzip.GzipFile:
    """A .gz stream's content, read through once first, so that not gzip, cut short or damaged are gunzip's
    errors and the reads that follow cannot fail."""
    stream.seek(0)
    if not (head := stream.read(8)).startswith(GZIP_MAGIC):
        raise _not_gzip(source, head)
    stream.seek(0)
    content = gzip.GzipFile(fileobj=stream)
    try:
        while content.read(TEXT_CHUNK):
            pass
        content.seek(0)
    except (OSError, EOFError, zlib.error) as exc:
        raise _damaged_gzip(source, exc) from exc
    return content


def _column_texts(table: Table, text_col: str, source: str) -> Iterator[str]:
    """Each row's text (stripped) of an unlabelled table."""
    if text_col not in table.columns:
        columns = ", ".join(table.columns) or "none"
        raise DataError(
            f"{source} has no text column {text_col!r} (columns: {columns})",
            hint=separator_hint(table.columns)
            or "name the column like the labelled data's (data.text_col), or push it as .txt, one text per line",
        )
    for n, row in table.rows:
        text = cell_text(row.get(text_col)).strip()
        refuse_nul((text,), source, n, text_col)
        yield text
