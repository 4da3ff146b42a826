"""Labelled data as CSV, JSON Lines or Parquet; labels as text, a JSON list or one 0/1 column per label."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from trainer.data.labelled import load_labelled, parse_labelled
from trainer.data.splits import make_splits
from trainer.errors import DataError
from trainer.storage import LocalBucket

OPTS = dict(text_col="text", label_col="labels", label_sep=";")
ROWS = [
    ("mon colis est en retard", ["livraison"]),
    ("facture et colis", ["facturation", "livraison"]),
    ("ma facture", ["facturation"]),
    ("le mot de passe", ["compte"]),
]


def _parquet(records: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records), buf)
    return buf.getvalue()


def _jsonl(records: list[dict]) -> bytes:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in records).encode() + b"\n"


def test_the_same_rows_read_alike_from_every_format():
    csv_raw = ("text,labels\n" + "".join(f'"{t}",{";".join(l)}\n' for t, l in ROWS)).encode()
    as_list = [{"text": t, "labels": l} for t, l in ROWS]
    as_text = [{"text": t, "labels": ";".join(l)} for t, l in ROWS]
    parsed = [
        parse_labelled(csv_raw, source="x.csv", fmt="csv", **OPTS),
        parse_labelled(_jsonl(as_list), source="x.jsonl", fmt="jsonl", **OPTS),
        parse_labelled(_jsonl(as_text), source="x.jsonl", fmt="jsonl", **OPTS),
        parse_labelled(_parquet(as_list), source="x.parquet", fmt="parquet", **OPTS),
        parse_labelled(_parquet(as_text), source="x.parquet", fmt="parquet", **OPTS),
    ]
    for data in parsed:
        assert data.texts == [t for t, _ in ROWS]
        assert data.labels == [sorted(l) for _, l in ROWS]
        assert data.multi_label and data.label_names == ["compte", "facturation", "livraison"]


def test_a_json_list_in_a_csv_cell_is_a_list_of_labels():
    raw = 'text,labels\nun,"[""a"", ""b""]"\ndeux,a\ntrois,"[""c""]"\n'.encode()
    data = parse_labelled(raw, source="x.csv", **OPTS)
    assert data.labels == [["a", "b"], ["a"], ["c"]]


def test_label_columns_keep_rows_without_a_label_and_make_the_task_multi_label():
    records = [
        {"text": "clean", "toxic": 0, "insult": 0},
        {"text": "bad", "toxic": 1, "insult": "1"},
        {"text": "rude", "toxic": True, "insult": False},
        {"text": "fine", "toxic": None, "insult": 0.0},
        {"text": "mean", "toxic": 0, "insult": 1},
    ]
    data = parse_labelled(_jsonl(records), source="x.jsonl", fmt="jsonl", label_cols=("toxic", "insult"), **OPTS)
    assert data.labels == [[], ["insult", "toxic"], ["toxic"], [], ["insult"]]
    assert data.multi_label and data.has_unlabelled and data.label_names == ["insult", "toxic"]
    with pytest.raises(DataError, match="several labels or none"):
        parse_labelled(
            _jsonl(records), source="x.jsonl", fmt="jsonl", label_cols=("toxic", "insult"), task="single_label", **OPTS
        )


def test_a_split_keeps_unlabelled_rows_on_both_sides():
    records = [{"text": f"t{i}", "a": int(i % 5 == 0), "b": int(i % 7 == 0)} for i in range(100)]
    data = parse_labelled(_parquet(records), source="x.parquet", fmt="parquet", label_cols=("a", "b"), **OPTS)
    splits = make_splits(data, valid_pct=0.2, seed=1)
    assert sorted(splits.train + splits.valid) == list(range(100))
    assert 15 <= len(splits.valid) <= 25
    assert any(not data.labels[i] for i in splits.valid) and any(not data.labels[i] for i in splits.train)


def test_unlabelled_rows_may_be_predicted_empty_only_when_the_data_has_some():
    from trainer.classification.metrics import decide

    probs = np.array([[0.1, 0.2], [0.9, 0.3]])
    forced = decide(probs, multi_label=True, thresholds=np.array([0.5, 0.5]))
    free = decide(probs, multi_label=True, thresholds=np.array([0.5, 0.5]), allow_empty=True)
    assert forced.tolist() == [[False, True], [True, False]]
    assert free.tolist() == [[False, False], [True, False]]


@pytest.mark.parametrize(
    "raw, fmt, kwargs, message",
    [
        (b'{"text": "a", "labels": "x"}\n{"text": "b", labels}\n', "jsonl", {}, "line 2 is not valid JSON"),
        (b'["a", "x"]\n', "jsonl", {}, "line 1 is a JSON list, not an object"),
        (b"not parquet at all", "parquet", {}, "not a readable Parquet file"),
        (b'{"text": "a", "labels": {"x": 1}}\n', "jsonl", {}, "is not a label"),
        (b'{"text": ["a"], "labels": "x"}\n', "jsonl", {}, "not text"),
        (b'{"text": "a", "toxic": 2}\n{"text": "b", "toxic": 0}\n', "jsonl", {"label_cols": ("toxic",)}, "not 0/1"),
        (b'{"text": "a", "toxic": 1}\n', "jsonl", {"label_cols": ("toxic", "insult")}, "no column 'insult'"),
        (b'{"text": "a", "labels": "x", "split": 3}\n', "jsonl", {}, "split 3 is not one of"),
    ],
)
def test_bad_files_get_one_clear_error(raw, fmt, kwargs, message):
    with pytest.raises(DataError, match=message) as info:
        parse_labelled(raw, source=f"train.{fmt}", fmt=fmt, **{**OPTS, **kwargs})
    assert info.value.hint


def test_valid_and_test_files_may_use_another_format_but_one_name_one_format(tmp_path):
    bucket = LocalBucket(tmp_path)
    train = [{"text": f"texte {i}", "labels": ["a" if i % 2 else "b"]} for i in range(20)]
    bucket.write_bytes("fr/data/train.jsonl", _jsonl(train))
    bucket.write_bytes("fr/data/test.csv", b"text,labels\nautre,a\nencore,b\n")
    data, _ = load_labelled(bucket, "fr", **OPTS)
    assert data.splits.count("test") == 2 and len(data.texts) == 22
    bucket.write_bytes("fr/data/train.parquet", _parquet(train))
    with pytest.raises(DataError, match="both exist") as info:
        load_labelled(bucket, "fr", **OPTS)
    assert "--replace" in info.value.hint


def test_valid_and_test_files_together_and_a_small_test_file_with_one_label(tmp_path):
    bucket = LocalBucket(tmp_path)
    bucket.write_bytes(
        "fr/data/train.csv", ("text,labels\n" + "".join(f"t{i},{'ab'[i % 2]}\n" for i in range(20))).encode()
    )
    bucket.write_bytes("fr/data/valid.jsonl", _jsonl([{"text": "v1", "labels": "a"}, {"text": "v2", "labels": "b"}]))
    bucket.write_bytes("fr/data/test.csv", b"text,labels\nonly one,a\n")  # one label, one row: fine for a test file
    data, _ = load_labelled(bucket, "fr", **OPTS)
    assert data.splits.count("valid") == 2 and data.splits.count("test") == 1


def test_json_lines_keep_unicode_line_separators_inside_strings():
    raw = _jsonl([{"text": "a\u2028b\u0085c", "labels": "x"}, {"text": "d", "labels": "y"}]).replace(b"\n", b"\r\n")
    data = parse_labelled(raw, source="x.jsonl", fmt="jsonl", **OPTS)
    assert data.texts[0] == "a\u2028b\u0085c" and data.labels == [["x"], ["y"]]


def test_integer_labels_read_alike_from_csv_and_parquet_with_nulls():
    records = [{"text": "a", "labels": 1}, {"text": "b", "labels": 2}, {"text": "c", "labels": None}]
    data = parse_labelled(_parquet(records), source="x.parquet", fmt="parquet", **OPTS)
    assert data.label_names == ["1", "2"] and data.skipped_empty == 1
