"""Validation of train.csv: every bad input gets one clear DataError."""

from __future__ import annotations

import pytest

from tests.support.text import parse
from trainer.errors import DataError


def test_multi_label_and_counts():
    d = parse("text,labels\nmon colis,livraison\nma facture et mon colis,facturation;livraison\n".encode())
    assert d.multi_label and d.label_counts == {"livraison": 2, "facturation": 1}
    assert d.labels[1] == ["facturation", "livraison"]


def test_empty_text_rows_are_skipped_with_a_count():
    d = parse(b"text,labels\n,a\n  ,b\nx,a\ny,b\nz,b\n")
    assert d.skipped_empty == 2 and len(d.texts) == 3
    assert any("skipped 2 row" in w for w in d.warnings)


def test_rare_label_is_warned():
    d = parse(b"text,labels\nx,a\ny,a\nz,b\n")
    assert any("fewer than 2" in w and "b" in w for w in d.warnings)


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"", "is empty"),
        (b"   \n", "is empty"),
        (b"body,labels\nx,a\n", "no column 'text'"),
        (b"text,label\nx,a\n", "no column 'labels'"),
        ("text,labels\ncaf\xe9,a\n".encode("latin-1"), "not UTF-8"),
        (b"text,labels\nx,\n", "no usable rows"),
        (b"text,labels\nx,a\ny,a\n", "single label"),
    ],
)
def test_bad_input(raw, message):
    with pytest.raises(DataError, match=message) as info:
        parse(raw)
    assert info.value.hint


def test_sample_data_is_valid():
    from tests.support.project import SAMPLE

    fr = parse((SAMPLE / "fr" / "train.csv").read_bytes())
    en = parse((SAMPLE / "en" / "train.csv").read_bytes())
    assert fr.multi_label and len(fr.texts) >= 300 and not fr.warnings
    assert not en.multi_label and len(en.texts) >= 300
