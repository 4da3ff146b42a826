"""Where a run's rows come from: the data's own split, or a stratified one without duplicates."""

from __future__ import annotations

import pytest

from tests.support.project import SAMPLE
from trainer.data.labelled import load_labelled, parse_labelled_csv
from trainer.data.splits import make_splits
from trainer.errors import DataError
from trainer.storage import open_bucket

OPTS = dict(text_col="text", label_col="labels", label_sep=";")


def test_stratified_split_drops_duplicates_and_keeps_every_label_on_both_sides():
    raw = (SAMPLE / "fr/train.csv").read_bytes()
    lines = raw.decode().splitlines()
    data = parse_labelled_csv(("\n".join(lines + lines[1:6]) + "\n").encode(), source="fr", **OPTS)
    s = make_splits(data, valid_pct=0.2, seed=42)
    assert s.source == "stratified" and s.duplicates_dropped == 5 and not s.test
    assert len(s.train) + len(s.valid) == len(data.texts) - 5
    assert not {data.texts[i] for i in s.train} & {data.texts[i] for i in s.valid}
    for label, n in data.label_counts.items():
        in_valid = sum(label in data.labels[i] for i in s.valid)
        assert in_valid == pytest.approx(0.2 * n, abs=3), label  # proportional, not by luck
    assert make_splits(data, valid_pct=0.2, seed=42) == s  # every rank computes the same split


def test_split_column_is_used_and_checked():
    rows = ["text,labels,split"] + [
        f"texte {i},{'a' if i % 2 else 'b'},{['train', 'valid', 'test', ''][i % 4]}" for i in range(40)
    ]
    data = parse_labelled_csv("\n".join(rows).encode(), source="x", **OPTS)
    s = make_splits(data, valid_pct=0.2, seed=1)
    assert s.source == "data" and len(s.valid) == 10 and len(s.test) == 10 and len(s.train) == 20
    with pytest.raises(DataError, match="split 'holdout' is not one of"):
        parse_labelled_csv(b"text,labels,split\nun,a,holdout\ndeux,b,train\n", source="x", **OPTS)


def test_test_csv_beside_train_csv(tmp_path):
    bucket = open_bucket(f"file://{tmp_path}")
    lines = (SAMPLE / "fr/train.csv").read_text().splitlines()
    bucket.write_bytes("fr/data/train.csv", ("\n".join(lines[:301]) + "\n").encode())
    bucket.write_bytes("fr/data/test.csv", ("\n".join(lines[:1] + lines[301:]) + "\n").encode())
    data, _ = load_labelled(bucket, "fr", **OPTS)
    s = make_splits(data, valid_pct=0.2, seed=42)
    assert len(s.test) == 80 and len(s.train) + len(s.valid) == 300
    assert {data.splits[i] for i in s.test} == {"test"} and not {data.splits[i] for i in s.train + s.valid} - {None}
    bucket.write_bytes("fr/data/train.csv", b"text,labels,split\nun,a,train\ndeux,b,test\n")
    with pytest.raises(DataError, match="has a .split. column and .* exists too"):
        load_labelled(bucket, "fr", **OPTS)


def test_task_type_is_explicit_and_a_rare_multi_label_row_is_named():
    rows = ["text,labels"] + [f"texte {i},{'a' if i % 2 else 'b'}" for i in range(300)] + ["texte double,a;b"]
    raw = "\n".join(rows).encode()
    auto = parse_labelled_csv(raw, source="x", **OPTS)
    assert auto.multi_label and any("under 1 %" in w and "lines 302" in w for w in auto.warnings)
    with pytest.raises(DataError, match="single_label but 1 row.*lines 302"):
        parse_labelled_csv(raw, source="x", task="single_label", **OPTS)
    forced = parse_labelled_csv("\n".join(rows[:-1]).encode(), source="x", task="multi_label", **OPTS)
    assert forced.multi_label and not forced.warnings
    assert not parse_labelled_csv("\n".join(rows[:-1]).encode(), source="x", **OPTS).multi_label


def test_with_only_a_test_split_the_tuning_slice_never_repeats_a_training_text():
    rows = ["text,labels,split"] + [f"t{i % 30},{'ab'[i % 2]}," for i in range(60)] + ["x,a,test", "y,b,test"]
    data = parse_labelled_csv("\n".join(rows).encode(), source="x", **OPTS)
    s = make_splits(data, valid_pct=0.2, seed=0)
    assert s.duplicates_dropped == 30 and len(s.test) == 2
    assert not {data.texts[i] for i in s.train} & {data.texts[i] for i in s.valid}
