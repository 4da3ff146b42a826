"""predict --input: rows stream through in batches in every format, beside their ids."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest

from trainer.errors import DataError
from trainer.serving.batch_predict import InputRows, classify_file

LABELS = ["neg", "pos"]


def fake_classify(seen: list[int]):
    def classify(texts):
        seen.append(len(texts))
        probs = np.array([[0.2, 0.8] if "good" in t else [0.9, 0.1] for t in texts])
        return [["pos"] if p[1] > 0.5 else ["neg"] for p in probs], probs

    return classify


def frame(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {"doc": [f"d{i}" for i in range(n)], "body": ["good, with a comma" if i % 2 else "bad\nline" for i in range(n)]}
    )


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet"])
def test_every_format_streams_in_batches(tmp_path, suffix):
    src, out = tmp_path / f"in.{suffix}", tmp_path / f"out.{suffix}"
    data = frame(250)
    if suffix == "csv":
        data.to_csv(src, index=False)
    elif suffix == "jsonl":
        data.to_json(src, orient="records", lines=True, force_ascii=False)
    else:
        data.to_parquet(src, index=False)
    seen: list[int] = []
    rows = InputRows(src, text_col="body", id_col="doc", batch_rows=100)
    progress = []
    written = classify_file(
        rows,
        out,
        classify=fake_classify(seen),
        labels=LABELS,
        label_sep=";",
        on_batch=lambda done, n: progress.append((done, n)),
    )
    assert written == 250 and seen == [100, 100, 50]  # never more than a batch in memory
    assert [n for _, n in progress] == [100, 200, 250] and progress[-1][0] <= rows.total
    got = (
        pd.read_csv(out)
        if suffix == "csv"
        else pd.read_json(out, lines=True)
        if suffix == "jsonl"
        else pd.read_parquet(out)
    )
    assert list(got.columns) == ["doc", "labels", "prob_neg", "prob_pos"]
    assert list(got["doc"][:3]) == ["d0", "d1", "d2"] and list(got["labels"][:2]) == ["neg", "pos"]
    assert got["prob_pos"][1] == pytest.approx(0.8)


def test_batches_classified_at_once_are_written_in_the_inputs_order_with_one_read_ahead(tmp_path):
    """The first batch is held until the second is classified beside it (so they run at once), and no more than
    one batch beyond those is read before the first is written: the file comes out in its own order, memory
    bounded."""
    import threading

    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    frame(500).to_csv(src, index=False)
    rows = InputRows(src, text_col="body", id_col="doc", batch_rows=100)
    second_done, started = threading.Event(), []
    written_before: dict[int, int] = {}
    base = fake_classify([])

    lock = threading.Lock()
    progress: list[int] = []

    def tracked(texts):
        with lock:
            n = len(started)
            started.append(n)
            written_before[n] = len(progress)
        if n == 0:
            assert second_done.wait(60), "the second batch never ran beside the first"
        result = base(texts)
        if n == 1:
            second_done.set()
        return result

    written = classify_file(
        rows, out, classify=tracked, labels=LABELS, label_sep=";", on_batch=lambda d, n: progress.append(n), at_once=2
    )
    assert written == 500 and progress == [100, 200, 300, 400, 500]
    assert list(pd.read_csv(out)["doc"]) == [f"d{i}" for i in range(500)]
    assert written_before[3] >= 1 and written_before[4] >= 2  # batch k+3 read once batch k was written


def test_a_failing_batch_classified_at_once_stops_the_file_with_its_error(tmp_path):
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    frame(500).to_csv(src, index=False)
    rows = InputRows(src, text_col="body", id_col="doc", batch_rows=100)
    calls: list[int] = []

    def classify(texts):
        calls.append(1)
        if len(calls) == 2:
            raise DataError("row 150 is not text")
        return fake_classify([])(texts)

    with pytest.raises(DataError, match="row 150"):
        classify_file(rows, out, classify=classify, labels=LABELS, label_sep=";", at_once=2)
    assert len(calls) <= 4  # stopped, not read to the end


def test_row_numbers_when_there_is_no_id_and_the_text_column_is_checked(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["good", "bad", "good"]))
    out = tmp_path / "out.csv"
    classify_file(
        InputRows(src, text_col="text", id_col=None, batch_rows=2),
        out,
        classify=fake_classify([]),
        labels=LABELS,
        label_sep=";",
    )
    with open(out) as fh:
        assert [r["row"] for r in csv.DictReader(fh)] == ["0", "1", "2"]
    with pytest.raises(DataError, match=r"no text column 'body' \(columns: text\)") as refused:
        classify_file(
            InputRows(src, text_col="body", id_col=None, batch_rows=2),
            tmp_path / "o2.csv",
            classify=fake_classify([]),
            labels=LABELS,
            label_sep=";",
        )
    assert "--text-col" in refused.value.hint
    with pytest.raises(DataError, match="cannot tell the format"):
        InputRows(tmp_path / "in.txt", text_col="text", id_col=None, batch_rows=2)


def test_bucket_input_and_output_and_nothing_overwritten(gcs_env, tmp_path):
    from types import SimpleNamespace

    from stacks.cli.predict_file import OutputExists, classify_file_cmd
    from trainer.storage import open_bucket

    bucket = open_bucket("gs://test-bucket")
    src = tmp_path / "in.parquet"
    frame(5).to_parquet(src, index=False)
    bucket.upload(src, "fr/scoring/in.parquet")
    model = SimpleNamespace(predict=fake_classify([]), labels=LABELS, run_id="r1", use_cores=lambda: 2)  # a ServedModel
    work = tmp_path / "work"
    work.mkdir()
    classify_file_cmd(
        model,
        "gs://test-bucket/fr/scoring/in.parquet",
        "gs://test-bucket/fr/scoring/out.jsonl",
        text_col="body",
        id_col="doc",
        batch_rows=2,
        label_sep="|",
        tmp=work,
    )
    lines = [json.loads(line) for line in bucket.read_bytes("fr/scoring/out.jsonl").decode().splitlines()]
    assert [line["doc"] for line in lines] == ["d0", "d1", "d2", "d3", "d4"] and lines[1]["labels"] == "pos"
    before = bucket.read_bytes("fr/scoring/out.jsonl")
    with pytest.raises(OutputExists):
        classify_file_cmd(
            model,
            "gs://test-bucket/fr/scoring/in.parquet",
            "gs://test-bucket/fr/scoring/out.jsonl",
            text_col="body",
            id_col="doc",
            batch_rows=2,
            label_sep="|",
            tmp=work,
        )
    assert bucket.read_bytes("fr/scoring/out.jsonl") == before
    with pytest.raises(DataError, match="does not exist"):
        classify_file_cmd(
            model,
            "gs://test-bucket/fr/scoring/missing.csv",
            str(tmp_path / "o.csv"),
            text_col="body",
            id_col=None,
            batch_rows=2,
            label_sep="|",
            tmp=work,
        )


@pytest.fixture
def served(project, monkeypatch):
    """`trainctl predict` in a project with one finished run, served by fake_classify (no model loads)."""
    from types import SimpleNamespace

    import stacks.cli.models_cmd as models_cmd
    from tests.support.runs import fake_run

    fake_run(project / ".trainstack" / "local" / "bucket", "fr", "20260101-100000-abcd", f1={"neg": 0.8, "pos": 0.6})
    model = SimpleNamespace(
        predict=fake_classify([]),
        labels=LABELS,
        run_id="20260101-100000-abcd",
        metrics=SimpleNamespace(kept="classifier"),
        ensemble=False,
        use_cores=lambda: 2,
    )
    monkeypatch.setattr(models_cmd, "_served_model", lambda *a, **kw: model)
    return model


def test_predict_json_of_texts_is_each_text_its_labels_and_probabilities(served):
    from typer.testing import CliRunner

    from stacks.cli.main import app

    r = CliRunner().invoke(app, ["predict", "fr", "good stuff", "bad stuff", "--json"])
    assert r.exit_code == 0, r.output
    document = json.loads(r.stdout)  # the human lines went to stderr
    assert {k: v for k, v in document.items() if k != "predictions"} == {
        "env": "local",
        "lang": "fr",
        "run_id": "20260101-100000-abcd",
        "kept": "classifier",
        "ensemble": False,
        "labels": {"neg": 1, "pos": 1},
        "no_label": 0,
        "empty_texts": 0,
    }
    first, second = document["predictions"]
    assert first["text"] == "good stuff" and first["labels"] == ["pos"]
    assert first["probabilities"] == {"neg": pytest.approx(0.2), "pos": pytest.approx(0.8)}
    assert second["labels"] == ["neg"] and "good stuff" in r.stderr


def test_predict_json_of_a_file_is_a_summary_with_the_rows_of_each_label(served, tmp_path):
    from typer.testing import CliRunner

    from stacks.cli.main import app

    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    frame(5).to_csv(src, index=False)  # rows 1 and 3 are "good": pos
    r = CliRunner().invoke(
        app,
        [
            "predict",
            "fr",
            "--input",
            str(src),
            "--output",
            str(out),
            "--text-col",
            "body",
            "--batch-rows",
            "2",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    document = json.loads(r.stdout)
    assert {k: v for k, v in document.items() if k != "seconds"} == {
        "env": "local",
        "lang": "fr",
        "run_id": "20260101-100000-abcd",
        "kept": "classifier",
        "ensemble": False,
        "input": str(src),
        "output": str(out),
        "rows": 5,
        "labels": {"neg": 3, "pos": 2},
        "no_label": 0,
        "empty_texts": 0,
    }
    assert document["seconds"] >= 0 and len(pd.read_csv(out)) == 5
    assert "5 rows classified" in r.stderr


def predict(*args: str):
    from typer.testing import CliRunner

    from stacks.cli.main import app

    return CliRunner().invoke(app, ["predict", "fr", *args], env={"COLUMNS": "400"})


def assert_refused(r, *said: str) -> None:
    """exit 2, one error with its next step, no traceback, and every phrase of `said` in it."""
    output = " ".join(r.output.split())
    assert r.exit_code == 2, output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert output.count("error:") == 1 and "→" in output and "Traceback" not in output, output
    for phrase in said:
        assert phrase in output, output


@pytest.mark.parametrize(
    "rows, said",
    [
        (
            [{"text": "good"}, {"text": {"a": 1}}, {"text": ["x"]}, {"text": {"b": 2}}],
            "dict or list values, not text, in rows 2, 3, 4",
        ),
        ([{"text": "good"}, {"text": [1, 2]}], "list values, not text, in row 2"),
    ],
)
def test_predict_refuses_json_lines_texts_that_are_not_text(served, tmp_path, rows, said):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.csv"
    src.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert_refused(predict("--input", str(src), "--output", str(out)), f"{src}: the text column 'text'", said)
    assert not out.exists()


@pytest.mark.parametrize("column", [[1.5, 2.5, None], [["a"], ["b"], None]], ids=["floats", "lists"])
def test_predict_refuses_a_parquet_text_column_that_is_not_text(served, tmp_path, column):
    src, out = tmp_path / "in.parquet", tmp_path / "out.csv"
    pd.DataFrame({"text": column}).to_parquet(src, index=False)
    assert_refused(predict("--input", str(src), "--output", str(out)), "not text (every row)", "--text-col")
    assert not out.exists()


def test_predict_counts_empty_and_null_texts_in_its_summary_and_json(served, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.csv"
    src.write_text('{"text": "good"}\n{"text": ""}\n{"text": null}\n{"text": "  "}\n{"other": 1}\n{"text": 7}\n')
    r = predict("--input", str(src), "--output", str(out), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["empty_texts"] == 4  # "", null, spaces, and the row without a text
    assert "warning: 4 empty or null texts (row 2, 3, 4, 5, the first is 1)" in " ".join(r.stderr.split())
    r = predict("good", "", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["empty_texts"] == 1
    assert "warning: 1 empty or null text (row 2" in r.stderr


def test_a_text_argument_that_is_not_utf8_is_refused_naming_the_byte(served):
    import os

    assert_refused(
        predict(os.fsdecode(b"caf\xe9 good")), "text 1 is not UTF-8: byte 0xe9 at position 4", "LANG=C.UTF-8"
    )
    assert_refused(predict("good", "--text-col", os.fsdecode(b"t\xffxt")), "--text-col is not UTF-8: byte 0xff")


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_a_latin1_input_file_is_refused_naming_the_file_and_how_to_convert_it(served, tmp_path, suffix):
    src, out = tmp_path / f"in.{suffix}", tmp_path / "out.csv"
    rows = ["good"] * 3 + ["facture réglée"]  # the byte that is not UTF-8 on line 5, in the fourth row
    body = (
        "text\n" + "".join(f"{t}\n" for t in rows)
        if suffix == "csv"
        else "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in ["x", *rows])
    )
    src.write_bytes(body.encode("latin-1"))
    assert_refused(
        predict("--input", str(src), "--output", str(out), "--batch-rows", "2"),
        f"{src} is not UTF-8 (invalid byte 0xe9 on line 5)",
        f"iconv -f latin1 -t utf-8 {src} > {tmp_path / f'in.utf8.{suffix}'}",
    )
    assert not out.exists()
