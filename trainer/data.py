"""Read and validate labelled data (`<lang>/data/train.csv`) without heavy imports.

trainctl runs the same checks as a preflight, so bad data fails before any
infrastructure is created or anything is written under `runs/`.
"""
from __future__ import annotations

import csv
import hashlib
import io
import random
from collections import Counter
from dataclasses import dataclass, field

from trainer.errors import DataError

DATA_KEY = "{lang}/data/train.csv"
SPLIT_KEYS = {"valid": "{lang}/data/valid.csv", "test": "{lang}/data/test.csv"}
SPLIT_COL = "split"
SPLIT_VALUES = ("train", "valid", "test")
CORPUS_PREFIX = "{lang}/data/corpus/"
MIN_EXAMPLES_PER_LABEL = 2
# A text field may be a whole document: far beyond csv's default 131072-character limit.
CSV_FIELD_LIMIT = 2**31 - 1


@dataclass
class LabelledData:
    """Validated rows: `row_ids` index into the CSV (header excluded, 0-based)."""

    row_ids: list[int]
    texts: list[str]
    labels: list[list[str]]
    label_counts: Counter
    multi_label: bool
    skipped_empty: int = 0
    warnings: list[str] = field(default_factory=list)
    sha256: str = ""
    splits: list[str | None] = field(default_factory=list)  # per row: train/valid/test from the data, or None

    @property
    def label_names(self) -> list[str]:
        return sorted(self.label_counts)


MULTI_LABEL_WARN_SHARE = 0.01  # auto: a multi-label task this rare is more likely a data error


def _decide_task(data: "LabelledData", task: str, source: str, label_sep: str) -> None:
    multi_rows = [data.row_ids[i] + 2 for i, tags in enumerate(data.labels) if len(tags) > 1]  # file line numbers
    shown = ", ".join(map(str, multi_rows[:10])) + (" …" if len(multi_rows) > 10 else "")
    if task == "single_label" and multi_rows:
        raise DataError(f"{source}: data.task is single_label but {len(multi_rows)} row(s) have several labels "
                        f"(separated by {label_sep!r}), lines {shown}",
                        hint="fix those rows, or set data.task: multi_label (or auto)")
    data.multi_label = task == "multi_label" or bool(multi_rows)
    if task == "auto" and multi_rows and len(multi_rows) < MULTI_LABEL_WARN_SHARE * len(data.labels):
        data.warnings.append(
            f"multi-label because {len(multi_rows)} of {len(data.labels)} rows (under 1 %) have several labels "
            f"(lines {shown}); set data.task: single_label to refuse them, or multi_label to confirm")


def parse_labelled_csv(raw: bytes, *, text_col: str, label_col: str, label_sep: str, source: str,
                       task: str = "auto") -> LabelledData:
    if not raw.strip():
        raise DataError(f"{source} is empty", hint="add a header row and labelled rows, then `trainctl data push`")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(
            f"{source} is not UTF-8 (invalid byte 0x{raw[exc.start]:02x} on line {line})",
            hint="re-encode it, e.g. `iconv -f latin1 -t utf-8 train.csv > train.utf8.csv`",
        ) from exc
    csv.field_size_limit(CSV_FIELD_LIMIT)  # process-wide, and only ever raised: harmless to other readers
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = reader.fieldnames or []
    missing = [c for c in (text_col, label_col) if c not in columns]
    if missing:
        raise DataError(
            f"{source} has no column {', '.join(repr(c) for c in missing)} (columns: {', '.join(columns) or 'none'})",
            hint="rename the column or set data.text_col / data.label_col (e.g. --set defaults.data.label_col=category)",
        )
    row_ids, texts, labels, marks = [], [], [], []
    skipped = 0
    counts: Counter = Counter()
    has_split = SPLIT_COL in columns and SPLIT_COL not in (text_col, label_col)
    try:
        for i, row in enumerate(reader):
            body = (row.get(text_col) or "").strip()
            tags = [t.strip() for t in (row.get(label_col) or "").split(label_sep) if t.strip()]
            if not body or not tags:
                skipped += 1
                continue
            tags = sorted(set(tags))
            mark = (row.get(SPLIT_COL) or "").strip().lower() or None if has_split else None
            if mark is not None and mark not in SPLIT_VALUES:
                raise DataError(f"{source} row {i + 2}: split {row.get(SPLIT_COL)!r} is not one of "
                                f"{', '.join(SPLIT_VALUES)}", hint="fix the value, or leave it empty for train")
            marks.append(mark)
            row_ids.append(i)
            texts.append(body)
            labels.append(tags)
            counts.update(tags)
    except csv.Error as exc:
        raise DataError(f"{source} is not valid CSV: {exc}", hint="check quoting around the reported line") from exc
    if not texts:
        raise DataError(
            f"{source} has no usable rows ({skipped} rows with empty text or label)",
            hint=f"fill the {text_col!r} and {label_col!r} columns",
        )
    if len(counts) < 2:
        raise DataError(f"{source} has a single label ({next(iter(counts))!r}): nothing to classify",
                        hint="provide examples of at least two labels")
    data = LabelledData(
        row_ids=row_ids, texts=texts, labels=labels, label_counts=counts,
        multi_label=any(len(t) > 1 for t in labels), skipped_empty=skipped,
        sha256=hashlib.sha256(raw).hexdigest(), splits=marks,
    )
    _decide_task(data, task, source, label_sep)
    if skipped:
        data.warnings.append(f"skipped {skipped} row(s) with empty text or label")
    rare = sorted(lbl for lbl, n in counts.items() if n < MIN_EXAMPLES_PER_LABEL)
    if rare:
        data.warnings.append(
            f"label(s) with fewer than {MIN_EXAMPLES_PER_LABEL} examples: {', '.join(rare)} "
            "(they cannot appear in both training and validation; metrics for them are unreliable)"
        )
    return data


def load_labelled(bucket, lang: str, *, text_col: str, label_col: str, label_sep: str,
                  task: str = "auto") -> tuple[LabelledData, bytes]:
    """train.csv plus valid.csv / test.csv beside it (their rows marked), validated alike.

    Returns the data and the raw bytes of every file read (for the run's data hash)."""
    key = DATA_KEY.format(lang=lang)
    if not bucket.exists(key):
        raise DataError(f"no labelled data at {bucket.url(key)}",
                        hint=f"stage it first: trainctl data push {lang} PATH/TO/train.csv")
    opts = dict(text_col=text_col, label_col=label_col, label_sep=label_sep, task=task)
    raw = bucket.read_bytes(key)
    data = parse_labelled_csv(raw, source=bucket.url(key), **opts)
    for mark, pattern in SPLIT_KEYS.items():
        extra_key = pattern.format(lang=lang)
        if not bucket.exists(extra_key):
            continue
        if any(m is not None for m in data.splits):
            raise DataError(f"{bucket.url(key)} has a {SPLIT_COL!r} column and {bucket.url(extra_key)} exists too",
                            hint=f"use one way to give the split: the column, or {mark}.csv")
        extra_raw = bucket.read_bytes(extra_key)
        extra = parse_labelled_csv(extra_raw, source=bucket.url(extra_key), **opts) if extra_raw.strip() else None
        if extra is None:
            continue
        raw += b"\0" + mark.encode() + b"\0" + extra_raw
        data.row_ids += extra.row_ids
        data.texts += extra.texts
        data.labels += extra.labels
        data.splits += [mark] * len(extra.texts)
        data.label_counts.update(extra.label_counts)
        data.multi_label = data.multi_label or extra.multi_label
        data.warnings += extra.warnings
    return data, raw
