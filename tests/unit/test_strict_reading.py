"""Bad input never costs data: every malformed row is an error naming its line, every dropped row is counted,
and `data push` checks corpus and unlabelled files, and warns of what it ignores, before staging anything."""

from __future__ import annotations

import gzip
import io

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from tests.support.project import SAMPLE
from tests.support.text import parse
from trainer.data.labelled import load_labelled, parse_labelled, unlabelled_texts
from trainer.errors import DataError
from trainer.storage import LocalBucket

runner = CliRunner()
OPTS = dict(text_col="text", label_col="labels", label_sep=";")


def rows_csv(n: int, *, bad_line: int | None = None, bad: str = "") -> bytes:
    """A header and `n` rows of two labels; line `bad_line` (the header is line 1) replaced by `bad`."""
    lines = ["text,labels"] + [f"texte numéro {i},{'ab'[i % 2]}" for i in range(n)]
    if bad_line is not None:
        lines[bad_line - 1] = bad
    return ("\n".join(lines) + "\n").encode()


def error_of(raw: bytes, fmt: str = "csv", **kwargs) -> DataError:
    with pytest.raises(DataError) as info:
        parse_labelled(raw, source=f"train.{fmt}", fmt=fmt, **{**OPTS, **kwargs})
    assert info.value.hint, "an error without a hint of what to do"
    return info.value


# -- labelled CSV: structure ---------------------------------------------------------------------------------


def test_an_unterminated_quote_mid_file_is_an_error_at_its_line_not_one_giant_field():
    err = error_of(rows_csv(60, bad_line=31, bad='"texte sans fin,a'))
    assert "train.csv line 31" in err.message and "quote" in err.message


def test_a_quote_closed_too_early_is_an_error_at_its_line():
    err = error_of(rows_csv(10, bad_line=5, bad='"il a dit "oui" hier",a'))
    assert "line 5" in err.message and "quote" in err.message and '""' in err.hint


def test_a_row_with_more_fields_than_the_header_is_an_error_not_a_made_up_label():
    err = error_of(rows_csv(20, bad_line=9, bad="bonjour, madame,a"))
    assert "line 9" in err.message and "3 fields" in err.message and "header has 2" in err.message
    assert "quote" in err.hint


def test_a_row_with_fewer_fields_than_the_header_is_an_error():
    err = error_of(rows_csv(20, bad_line=4, bad="juste un texte"))
    assert "line 4" in err.message and "1 field" in err.message


def test_lines_are_the_file_s_own_after_a_text_over_several_lines():
    raw = b'text,labels\n"un texte\nsur trois\nlignes",a\nok,b\ntrop,de,champs\n'
    assert "line 6" in error_of(raw).message
    data = parse(b'text,labels\n"un texte\nsur deux",a\n\nok,b\n')
    assert data.lines == [2, 5]


def test_a_duplicated_header_column_is_an_error_naming_it():
    err = error_of(b"text,labels,text\nx,a,y\nz,b,w\n")
    assert "'text'" in err.message and "twice" in err.message


def test_a_nul_byte_is_an_error_at_its_line():
    err = error_of(rows_csv(10, bad_line=7, bad="un\x00texte,a"))
    assert "line 7" in err.message and "NUL" in err.message


def test_undecodable_bytes_name_the_line_and_a_utf16_file_says_so():
    raw = rows_csv(10).replace("numéro 4".encode(), "numéro 4".encode("latin-1"))
    assert "line 6" in error_of(raw).message and "iconv" in error_of(raw).hint
    err = error_of("text,labels\nx,a\ny,b\n".encode("utf-16"))
    assert "UTF-16" in err.message


def test_a_tab_separated_file_named_csv_gets_a_hint_about_the_separator():
    err = error_of(b"text\tlabels\nx\ta\ny\tb\n")
    assert "tab" in err.hint


# -- labelled JSON Lines and Parquet -------------------------------------------------------------------------


def test_a_nul_in_a_json_string_is_an_error_at_its_line():
    raw = b'{"text": "ok", "labels": "a"}\n{"text": "x\\u0000y", "labels": "b"}\n'
    err = error_of(raw, "jsonl")
    assert "line 2" in err.message and "NUL" in err.message


def test_a_json_key_given_twice_is_an_error_naming_it():
    err = error_of(b'{"text": "a", "labels": "x", "text": "b"}\n', "jsonl")
    assert "line 1" in err.message and "'text'" in err.message


def test_a_parquet_file_with_a_duplicated_column_is_an_error_naming_it():
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_arrays(
        [pa.array(["a", "b"]), pa.array(["x", "y"]), pa.array(["c", "d"])], names=["text", "labels", "text"]
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    err = error_of(buf.getvalue(), "parquet")
    assert "'text'" in err.message and "twice" in err.message


# -- dropped rows are counted, with their lines --------------------------------------------------------------


def test_rows_dropped_for_an_empty_label_or_text_are_counted_with_their_lines():
    raw = rows_csv(59, bad_line=7, bad="sans label,").replace(b"texte num\xc3\xa9ro 17,", b",", 1)
    data = parse(raw)
    assert data.total_rows == 59 and len(data.texts) == 57
    summary = next(w for w in data.warnings if w.startswith("kept"))
    assert summary == ("kept 57 of 59 rows: skipped 1 row with an empty label (line 7), 1 with an empty text (line 19)")


def test_no_usable_rows_says_why_each_row_was_dropped():
    err = error_of(b"text,labels\nx,\n,a\n")
    assert "1 row with an empty label (line 2)" in err.message
    assert "1 with an empty text (line 3)" in err.message


# -- unlabelled texts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, name, message",
    [
        (b"un texte\nun\x00autre\n", "unlabelled.txt", "line 2"),
        ("un texte\ncaf\xe9\n".encode("latin-1"), "unlabelled.txt", "not UTF-8"),
        (b"not gzip at all", "unlabelled.txt.gz", "not a readable gzip file"),
        (gzip.compress(b"un texte\n" * 200, mtime=0)[:-12], "unlabelled.txt.gz", "gzip"),
        (gzip.compress(b"un\x00texte\n", mtime=0), "unlabelled.txt.gz", "NUL"),
    ],
)
def test_unlabelled_text_files_with_binary_content_are_errors(raw, name, message):
    with pytest.raises(DataError) as info:
        unlabelled_texts(raw, name, text_col="text", source=name)
    assert message in info.value.message and info.value.hint


# -- valid/test labels the training data never has -----------------------------------------------------------


def test_load_labelled_warns_of_valid_labels_never_seen_in_train(tmp_path):
    bucket = LocalBucket(tmp_path)
    bucket.write_bytes("fr/data/train.csv", rows_csv(20))
    bucket.write_bytes("fr/data/valid.csv", b"text,labels\nv1,a\nv2,zzz\nv3,yyy\n")
    data, _ = load_labelled(bucket, "fr", **OPTS)
    warning = next(w for w in data.warnings if "never occur" in w)
    assert "valid.csv" in warning and "yyy, zzz" in warning


# -- data push -----------------------------------------------------------------------------------------------


def bucket_files(project) -> dict[str, bytes]:
    root = project / ".trainstack" / "local" / "bucket"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def push(*args: str):
    r = runner.invoke(app, ["data", "push", "fr", *args], env={"COLUMNS": "200"})
    return r, " ".join(r.output.split())


def data_folder(tmp_path, **files: bytes):
    folder = tmp_path / "data"
    (folder / "corpus").mkdir(parents=True)
    (folder / "train.csv").write_bytes((SAMPLE / "fr" / "train.csv").read_bytes())
    for name, raw in files.items():
        (folder / name.replace("__", "/")).write_bytes(raw)
    return folder


@pytest.mark.parametrize(
    "name, raw, message",
    [
        ("corpus__a.txt.gz", b"plain text, not gzip\n", "not a readable gzip file"),
        ("corpus__a.txt.gz", gzip.compress(b"une ligne de corpus\n" * 500, mtime=0)[:-20], "gzip"),
        ("corpus__a.txt", b"une ligne\n\x00\x01\x02binaire\n", "NUL"),
        ("corpus__a.txt", "une ligne\ncaf\xe9\n".encode("latin-1"), "not UTF-8"),
        ("unlabelled.txt", b"ok\nun\x00texte\n", "NUL"),
        ("unlabelled.txt.gz", b"\x1f\x8b not really", "gzip"),
    ],
)
def test_data_push_refuses_a_broken_corpus_or_unlabelled_file_and_stages_nothing(project, tmp_path, name, raw, message):
    before = bucket_files(project)
    r, out = push(str(data_folder(tmp_path, **{name: raw})))
    assert r.exit_code == 2, r.output
    assert name.replace("__", "/") in out and message in out and "→" in out and "Traceback" not in out
    assert bucket_files(project) == before


def test_data_push_of_a_csv_with_an_unterminated_quote_is_exit_2_and_stages_nothing(project, tmp_path):
    bad = tmp_path / "train.csv"
    bad.write_bytes(rows_csv(60, bad_line=31, bad='"texte sans fin,a'))
    r, out = push(str(bad))
    assert r.exit_code == 2 and "line 31" in out and str(bad) in out
    assert bucket_files(project) == {}


def test_data_push_says_how_many_rows_it_kept_and_why_it_dropped_the_others(project, tmp_path):
    data = tmp_path / "train.csv"
    data.write_bytes(rows_csv(60, bad_line=7, bad="sans label,"))
    r, out = push(str(data))
    assert r.exit_code == 0, r.output
    assert "kept 59 of 60 rows: skipped 1 row with an empty label (line 7)" in out


def test_data_push_warns_of_valid_and_test_labels_never_in_train(project, tmp_path):
    labels = [f"jamais{i}" for i in range(8)]
    valid = "text,labels\n" + "".join(f"v{i},{lbl}\n" for i, lbl in enumerate(labels))
    r, out = push(str(data_folder(tmp_path, **{"valid.csv": valid.encode()})))
    assert r.exit_code == 0, r.output
    assert "8 label(s) of" in out and "never occur" in out
    assert "jamais0, jamais1, jamais2, jamais3, jamais4 and 3 more" in out
    # a valid file pushed alone is compared with the training data already staged
    alone = tmp_path / "valid.csv"
    alone.write_bytes(b"text,labels\nv1,inconnu\n")
    r, out = push(str(alone), "--replace")
    assert r.exit_code == 0 and "inconnu" in out and "never occur" in out, r.output


def test_data_push_names_the_files_it_ignores_in_a_folder(project, tmp_path):
    folder = data_folder(tmp_path, **{"notes.md": b"x", "train.tsv": b"x", "corpus__readme.md": b"x"})
    r, out = push(str(folder))
    assert r.exit_code == 0, r.output
    assert "ignored" in out and "notes.md" in out and "train.tsv" in out and "corpus/readme.md" in out
    assert not any("notes" in k or "readme" in k for k in bucket_files(project))


def test_data_push_help_shows_the_optional_valid_and_test_files():
    r = runner.invoke(app, ["data", "push", "--help"], env={"COLUMNS": "250"})
    assert "[valid.* test.*]" in " ".join(r.output.split()), r.output
