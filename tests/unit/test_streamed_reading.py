"""The readers of a stream (`data push`, on a file of any size, a chunk at a time) give what the readers of bytes
(the trainer) give, whatever the bytes: the same counts and warnings, or the same error first."""

from __future__ import annotations

import gzip
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_fuzz_inputs import FUZZ, ROWS, TEXT_FILES, any_csv, csv_bytes, damaged, jsonl_bytes, parquet_bytes
from trainer.data.labelled import parse_labelled
from trainer.data.tables import TEXT_CHUNK
from trainer.data.textfiles import count_unlabelled_texts, unlabelled_texts
from trainer.errors import DataError

OPTS = dict(text_col="text", label_col="labels", label_sep=";")


def outcome(raw: bytes, fmt: str, *, streamed: bool) -> tuple:
    """What parse_labelled makes of `raw`: its counts and warnings, or its error."""
    try:
        data = parse_labelled(
            io.BytesIO(raw) if streamed else raw, source=f"train.{fmt}", fmt=fmt, keep_rows=not streamed, **OPTS
        )
    except DataError as exc:
        return "error", exc.message, exc.hint
    kept = data.kept_rows if streamed else len(data.texts)
    return (
        "read",
        data.total_rows,
        kept,
        dict(data.label_counts),
        data.skipped,
        data.multi_label,
        data.warnings,
        data.row_summary,
    )


def assert_alike(raw: bytes, fmt: str) -> None:
    assert outcome(raw, fmt, streamed=True) == outcome(raw, fmt, streamed=False)


@FUZZ
@given(raw=any_csv())
def test_a_streamed_csv_reads_as_its_bytes_do(raw):
    assert_alike(raw, "csv")


@FUZZ
@given(raw=st.one_of(st.binary(max_size=120), *[st.builds(jsonl_bytes, ROWS).flatmap(damaged)] * 2))
def test_a_streamed_json_lines_file_reads_as_its_bytes_do(raw):
    assert_alike(raw, "jsonl")


@settings(FUZZ, max_examples=40)
@given(rows=ROWS, cut=st.none() | st.floats(0, 1))
def test_a_streamed_parquet_file_reads_as_its_bytes_do(rows, cut):
    raw = parquet_bytes(rows)
    raw = raw if cut is None else raw[: max(1, int(len(raw) * cut))]
    streamed, whole = outcome(raw, "parquet", streamed=True), outcome(raw, "parquet", streamed=False)
    if whole[0] == "error" and "is not a readable Parquet file" in whole[1]:  # pyarrow's own words may differ
        assert streamed[0] == "error" and "is not a readable Parquet file" in streamed[1], streamed
    else:
        assert streamed == whole


@FUZZ
@given(
    raw=TEXT_FILES,
    name=st.sampled_from(["unlabelled.txt", "unlabelled.txt.gz", "unlabelled.csv"]),
    cut=st.integers(0, 40),
)
def test_unlabelled_texts_counted_from_a_stream_are_those_the_trainer_reads(raw, name, cut):
    if name.endswith(".gz"):
        raw = gzip.compress(raw)
        raw = raw[: len(raw) - cut] if cut < len(raw) else raw
    elif name.endswith(".csv"):
        raw = b"text\n" + raw
    try:
        read = len(unlabelled_texts(raw, name, text_col="text", source=name))
    except DataError as exc:
        read = exc.message
    try:
        counted = count_unlabelled_texts(io.BytesIO(raw), name, text_col="text", source=name)
    except DataError as exc:
        counted = exc.message
    assert counted == read


def test_a_character_cut_between_two_chunks_is_read_and_a_bad_byte_after_it_names_its_line():
    head = b"text,labels\n" + b"x" * (TEXT_CHUNK - 16) + b",a\n"
    raw = head + "\u00e9t\u00e9,a\n".encode() + b"deux,b\n"
    assert raw[TEXT_CHUNK - 1 : TEXT_CHUNK + 1] == "\u00e9".encode()  # the é straddles the first chunk's end
    assert_alike(raw, "csv")
    bad = raw + b"caf\xe9,a\n"  # latin-1, three lines further
    assert outcome(bad, "csv", streamed=True)[1] == "train.csv is not UTF-8 (invalid byte 0xe9 on line 5)"
    assert_alike(bad, "csv")


def test_a_nul_byte_is_said_before_a_bad_byte_and_an_encoding_error_before_a_bad_row():
    rows = csv_bytes([("un", "a"), ("deux", "b")])
    late_nul = rows + b"caf\xe9,a\n" + b"x" * TEXT_CHUNK + b"\nun\x00,b\n"
    assert "holds a NUL byte" in outcome(late_nul, "csv", streamed=True)[1]
    assert_alike(late_nul, "csv")
    bad_row_first = rows + b"trop,de,champs\n" + b"x" * TEXT_CHUNK + b"\ncaf\xe9,a\n"
    assert "is not UTF-8" in outcome(bad_row_first, "csv", streamed=True)[1]
    assert_alike(bad_row_first, "csv")
    bad_json_last = jsonl_bytes([("un", "a"), ("deux", "b")] * 3) + b'{"text": oops}\n'
    assert "line 7 is not valid JSON" in outcome(bad_json_last, "jsonl", streamed=True)[1]
    assert_alike(bad_json_last, "jsonl")


def test_after_a_utf8_bom_a_bad_byte_is_named_with_its_own_line_on_either_reader():
    raw = "\ufefftext,labels\nun,a\n".encode() + b"caf\xe9,b\n"
    for streamed in (True, False):
        assert outcome(raw, "csv", streamed=streamed)[1] == "train.csv is not UTF-8 (invalid byte 0xe9 on line 3)"
