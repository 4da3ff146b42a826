"""Read and validate labelled data (`<lang>/data/train.csv`, `.jsonl` or `.parquet`) without heavy imports.

trainctl runs the same checks as a preflight, so bad data fails before any
infrastructure is created or anything is written under `runs/`.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import BinaryIO

from trainer.data.tables import SUFFIXES, cell_text, flag, format_of, label_list, read_table, refuse_nul, separator_hint

# unlabelled_texts: callers import it from here, where it long lived
from trainer.data.textfiles import CORPUS_SUFFIXES, unlabelled_texts  # noqa: F401
from trainer.errors import DataError

DATA_PREFIX = "{lang}/data/"
SPLIT_FILES = ("valid", "test")  # beside train.<fmt>; their rows are marked with the file's name
SPLIT_COL = "split"
SPLIT_VALUES = ("train", "valid", "test")
CORPUS_PREFIX = "{lang}/data/corpus/"
MIN_EXAMPLES_PER_LABEL = 2


@dataclass
class LabelledData:
    """Validated rows: `row_ids` index the file's records (0-based; a CSV's header excluded)."""

    row_ids: list[int]
    texts: list[str]
    labels: list[list[str]]
    label_counts: Counter
    multi_label: bool
    skipped_empty: int = 0
    warnings: list[str] = field(default_factory=list)
    sha256: str = ""  # of the bytes parsed; "" when they came as a stream
    splits: list[str | None] = field(default_factory=list)  # per row: train/valid/test from the data, or None
    lines: list[int] = field(default_factory=list)  # per row: its line (row) number in the file, for messages
    total_rows: int = 0  # the file's records, kept or skipped
    kept_rows: int = 0  # of those, the ones kept (both of the parsed file alone, not of valid/test rows added)
    skipped: dict[str, list[int]] = field(default_factory=dict)  # why (an empty text, ...) -> its lines

    @property
    def label_names(self) -> list[str]:
        return sorted(self.label_counts)

    @property
    def row_summary(self) -> str:
        """Every row accounted for: "kept 58 of 60 rows: skipped 2 rows with an empty label (lines 7, 19)"."""
        kept = f"kept {self.kept_rows} of {self.total_rows} rows"
        return f"{kept}: skipped {skipped_text(self.skipped)}" if self.skipped else kept

    @property
    def has_unlabelled(self) -> bool:
        """Rows with no label (all-zero label columns): predictions may then be empty too."""
        return any(not tags for tags in self.labels)


def lines_text(lines: list[int], most: int = 10) -> str:
    """Lines for a message: "line 7", "lines 7, 19", "lines 1, 2, … (40 in all)"."""
    shown = ", ".join(map(str, lines[:most])) + (f", … ({len(lines)} in all)" if len(lines) > most else "")
    return f"line{'s' if len(lines) > 1 else ''} {shown}"


def skipped_text(skipped: dict[str, list[int]]) -> str:
    """Skipped rows by reason: "1 row with an empty label (line 7), 1 with an empty text (line 19)"."""
    parts = [f"{len(lines)} with {why} ({lines_text(lines)})" for why, lines in skipped.items()]
    first = len(next(iter(skipped.values())))
    parts[0] = parts[0].replace(" with ", f" row{'s' if first != 1 else ''} with ", 1)
    return ", ".join(parts)


def _skip_reason(body: str, tags: list[str], label_cols: tuple[str, ...]) -> str | None:
    """Why a row is no example: no text, or no label (with label columns, a row of zeros is an example)."""
    no_label = not tags and not label_cols
    if not body:
        return "an empty text and label" if no_label else "an empty text"
    return "an empty label" if no_label else None


MULTI_LABEL_WARN_SHARE = 0.01  # auto: a multi-label task this rare is more likely a data error


def _decide_task(data: "LabelledData", task: str, source: str, label_how: str, multi: tuple[int, list[int]]) -> None:
    n_multi, first_lines = multi  # kept rows with several labels or none: how many, the first ten's lines
    shown = ", ".join(map(str, first_lines)) + (" …" if n_multi > 10 else "")
    if task == "single_label" and n_multi:
        raise DataError(
            f"{source}: data.task is single_label but {n_multi} row(s) have several labels "
            f"or none ({label_how}), lines {shown}",
            hint="fix those rows, or set data.task: multi_label (or auto)",
        )
    data.multi_label = task == "multi_label" or bool(n_multi)
    if task == "auto" and n_multi and n_multi < MULTI_LABEL_WARN_SHARE * data.kept_rows:
        data.warnings.append(
            f"multi-label because {n_multi} of {data.kept_rows} rows (under 1 %) have several labels "
            f"(lines {shown}); set data.task: single_label to refuse them, or multi_label to confirm"
        )


def _row_labels(
    row: dict, n: int, *, label_col: str, label_sep: str, label_cols: tuple[str, ...], source: str
) -> list[str]:
    if label_cols:
        tags = []
        for col in label_cols:
            value = flag(row.get(col))
            if value is None:
                raise DataError(
                    f"{source} line {n}: label column {col!r} holds {row.get(col)!r}, not 0/1",
                    hint="label columns (data.label_cols) hold 1 when the label applies, else 0 "
                    "(true/false and empty cells are accepted too)",
                )
            if value:
                tags.append(col)
        return tags
    tags = label_list(row.get(label_col), label_sep)
    if tags is None:
        raise DataError(
            f"{source} line {n}: the {label_col!r} value {row.get(label_col)!r} is not a label, "
            "a list of labels or labels separated by " + repr(label_sep),
            hint='write e.g. "billing", "billing;delivery" or ["billing", "delivery"]',
        )
    return tags


def _read_rows(
    table,
    data: LabelledData,
    *,
    text_col: str,
    label_col: str,
    label_sep: str,
    label_cols: tuple[str, ...],
    source: str,
    keep_rows: bool,
) -> tuple[int, list[int]]:
    """Every row of `table` into `data`: counted, kept (its text, labels and marks only with `keep_rows`) or
    skipped with its reason -> how many kept rows have several labels or none, and the first ten's lines."""
    has_split = SPLIT_COL in table.columns and SPLIT_COL not in (text_col, label_col, *label_cols)
    n_multi, first_multi = 0, []
    for i, (n, row) in enumerate(table.rows):
        data.total_rows = i + 1
        try:
            body = cell_text(row.get(text_col)).strip()
        except TypeError:
            raise DataError(
                f"{source} line {n}: the {text_col!r} value is a {type(row.get(text_col)).__name__}, not text",
                hint=f"the {text_col!r} column must hold strings",
            ) from None
        tags = _row_labels(row, n, label_col=label_col, label_sep=label_sep, label_cols=label_cols, source=source)
        if table.fmt != "csv":  # a CSV's NUL bytes were refused with the file
            refuse_nul((body,), source, n, text_col)
            refuse_nul(tags, source, n, label_col)
        if (reason := _skip_reason(body, tags, label_cols)) is not None:
            data.skipped.setdefault(reason, []).append(n)
            continue
        tags = sorted(set(tags))
        raw_mark = row.get(SPLIT_COL) if has_split else None
        mark = cell_text(raw_mark).strip().lower() or None if isinstance(raw_mark, (str, type(None))) else "?"
        if mark is not None and mark not in SPLIT_VALUES:
            raise DataError(
                f"{source} line {n}: split {raw_mark!r} is not one of {', '.join(SPLIT_VALUES)}",
                hint="fix the value, or leave it empty for train",
            )
        data.kept_rows += 1
        data.label_counts.update(tags)
        if len(tags) != 1:
            n_multi += 1
            if len(first_multi) < 10:
                first_multi.append(n)
        if keep_rows:
            data.splits.append(mark)
            data.lines.append(n)
            data.row_ids.append(i)
            data.texts.append(body)
            data.labels.append(tags)
    return n_multi, first_multi


def parse_labelled(
    raw: bytes | BinaryIO,
    *,
    text_col: str,
    label_col: str,
    label_sep: str,
    source: str,
    task: str = "auto",
    label_cols: tuple[str, ...] = (),
    fmt: str = "csv",
    whole: bool = True,
    keep_rows: bool = True,
) -> LabelledData:
    """Validated rows of one labelled-data file (`fmt`: csv, jsonl or parquet); `whole=False` for
    a valid/test file, which may hold a single label and rare ones (the train file is the whole).

    Labels come from `label_col` (a separated string or a list) or, when `label_cols`
    is given, from one 0/1 column per label; a row whose label columns are all 0 is kept
    as a row with no label (multi-label), where an empty `label_col` cell is skipped.

    `raw`: the file's bytes, or a seekable binary stream of them (read_table); `keep_rows=False` keeps the
    counts alone (data push, on a file of any size): texts, labels, row_ids, lines and splits stay empty."""
    table = read_table(raw, fmt, source)
    columns = table.columns
    label_cols = tuple(label_cols)
    missing = [c for c in (text_col, *(label_cols or (label_col,))) if c not in columns]
    if missing:
        which = "data.label_cols" if label_cols and text_col not in missing else "data.text_col / data.label_col"
        raise DataError(
            f"{source} has no column {', '.join(repr(c) for c in missing)} (columns: {', '.join(columns) or 'none'})",
            hint=separator_hint(columns)
            or f"rename the column or set {which} (e.g. --set defaults.data.label_col=category)",
        )
    data = LabelledData(
        row_ids=[],
        texts=[],
        labels=[],
        label_counts=Counter(),
        multi_label=False,
        sha256=hashlib.sha256(raw).hexdigest() if isinstance(raw, (bytes, bytearray)) else "",
    )
    multi = _read_rows(
        table,
        data,
        text_col=text_col,
        label_col=label_col,
        label_sep=label_sep,
        label_cols=label_cols,
        source=source,
        keep_rows=keep_rows,
    )
    data.skipped_empty = sum(map(len, data.skipped.values()))
    if not data.kept_rows:
        why, what = f": {skipped_text(data.skipped)}" if data.skipped else "", f"{label_col!r} column"
        raise DataError(
            f"{source} has no usable rows ({data.total_rows} rows{why})",
            hint=f"fill the {text_col!r} and {'label columns' if label_cols else what}",
        )
    if label_cols:
        data.label_counts.update({c: 0 for c in label_cols})  # a label column with no positive row is still a label
    if len(data.label_counts) < 2 and whole:
        raise DataError(
            f"{source} has a single label ({next(iter(data.label_counts), None)!r}): nothing to classify",
            hint="provide examples of at least two labels",
        )
    _decide_task(data, task, source, "label columns" if label_cols else repr(label_sep), multi)
    if data.skipped:
        data.warnings.append(data.row_summary)
    if alike := same_but_case(data.label_counts):
        data.warnings.append(
            f"labels that differ only in case: {'; '.join(alike)} (they are different labels: "
            "write each one way if they mean the same)"
        )
    rare = sorted(lbl for lbl, n in data.label_counts.items() if n < MIN_EXAMPLES_PER_LABEL) if whole else []
    if rare:
        data.warnings.append(
            f"label(s) with fewer than {MIN_EXAMPLES_PER_LABEL} examples: {', '.join(rare)} "
            "(they cannot appear in both training and validation; metrics for them are unreliable)"
        )
    return data


def same_but_case(counts: Counter, most: int = 5) -> list[str]:
    """Groups of labels that differ only in case, each `A (n rows) / a (m rows)`, the first `most`."""
    groups: dict[str, list[str]] = {}
    for label in sorted(counts):
        groups.setdefault(label.casefold(), []).append(label)
    alike = [" / ".join(f"{lbl} ({counts[lbl]:,} rows)" for lbl in g) for g in groups.values() if len(g) > 1]
    return alike[:most]


def parse_labelled_csv(raw: bytes, **kwargs) -> LabelledData:
    return parse_labelled(raw, fmt="csv", **kwargs)


def corpus_keys(bucket, lang: str) -> list[str]:
    """The corpus files: `.txt` and `.txt.gz` objects under `<lang>/data/corpus/`, sorted."""
    return sorted(k for k in bucket.list(CORPUS_PREFIX.format(lang=lang)) if k.endswith(CORPUS_SUFFIXES))


def data_file(bucket, lang: str, name: str) -> str | None:
    """The key of `<lang>/data/<name>.csv|.jsonl|.parquet`, None if absent; two formats at once are refused."""
    keys = [k for k in (f"{DATA_PREFIX.format(lang=lang)}{name}{suffix}" for suffix in SUFFIXES) if bucket.exists(k)]
    if len(keys) > 1:
        raise DataError(
            f"{' and '.join(bucket.url(k) for k in keys)} both exist: which one is the data?",
            hint=f"keep one: `trainctl data push {lang} FILE --replace` replaces the other",
        )
    return keys[0] if keys else None


def load_labelled(
    bucket,
    lang: str,
    *,
    text_col: str,
    label_col: str,
    label_sep: str,
    task: str = "auto",
    label_cols: tuple[str, ...] = (),
) -> tuple[LabelledData, bytes]:
    """train.<fmt> plus valid.<fmt> / test.<fmt> beside it (their rows marked), validated alike.

    Returns the data and the raw bytes of every file read (for the run's data hash)."""
    key = data_file(bucket, lang, "train")
    if key is None:
        raise DataError(
            f"no labelled data at {bucket.url(DATA_PREFIX.format(lang=lang) + 'train.csv')} (or .jsonl, .parquet)",
            hint=f"stage it first: trainctl data push {lang} PATH/TO/train.csv",
        )
    opts = dict(text_col=text_col, label_col=label_col, label_sep=label_sep, task=task, label_cols=tuple(label_cols))
    raw = bucket.read_bytes(key)
    data = parse_labelled(raw, source=bucket.url(key), fmt=format_of(key), **opts)
    split_column = any(m is not None for m in data.splits)  # before valid/test rows are marked
    train_labels = present_labels(data)
    for mark in SPLIT_FILES:
        extra_key = data_file(bucket, lang, mark)
        if extra_key is None:
            continue
        if split_column:
            raise DataError(
                f"{bucket.url(key)} has a {SPLIT_COL!r} column and {bucket.url(extra_key)} exists too",
                hint=f"use one way to give the split: the column, or the {mark} file",
            )
        extra_raw = bucket.read_bytes(extra_key)
        extra = (
            parse_labelled(extra_raw, source=bucket.url(extra_key), fmt=format_of(extra_key), whole=False, **opts)
            if extra_raw.strip()
            else None
        )
        if extra is None:
            continue
        raw += b"\0" + mark.encode() + b"\0" + extra_raw
        data.row_ids += extra.row_ids
        data.texts += extra.texts
        data.labels += extra.labels
        data.lines += extra.lines
        data.splits += [mark] * len(extra.texts)
        data.label_counts.update(extra.label_counts)
        data.multi_label = data.multi_label or extra.multi_label
        # the train file's own warnings name no file; these would read as the train file's
        data.warnings += [f"{bucket.url(extra_key)}: {w}" for w in extra.warnings]
        if (unseen := unseen_labels_warning(train_labels, extra, bucket.url(extra_key))) is not None:
            data.warnings.append(unseen)
    return data, raw


def present_labels(data: LabelledData) -> set[str]:
    """Labels with at least one row (a label column may have none)."""
    return {label for label, n in data.label_counts.items() if n}


def unseen_labels_warning(train_labels: set[str], extra: LabelledData, source: str, most: int = 5) -> str | None:
    """A valid/test file's labels that the training data never has: the model cannot learn them."""
    unseen = sorted(present_labels(extra) - train_labels)
    if not unseen:
        return None
    shown = ", ".join(unseen[:most]) + (f" and {len(unseen) - most} more" if len(unseen) > most else "")
    return (
        f"{len(unseen)} label(s) of {source} never occur in the training data: {shown} "
        "(no model can learn them: their rows only count as misses); fix the spelling, "
        "or add training rows with them"
    )


UNLABELLED = "unlabelled"  # <lang>/data/unlabelled.<fmt>: in-domain texts for LM fine-tuning, never scored
UNLABELLED_SUFFIXES = (*SUFFIXES, *CORPUS_SUFFIXES)


def unlabelled_key(bucket, lang: str) -> str | None:
    """The key of `<lang>/data/unlabelled.csv|.jsonl|.parquet|.txt|.txt.gz`, None if absent; two are refused."""
    keys = [
        k for k in (f"{DATA_PREFIX.format(lang=lang)}{UNLABELLED}{s}" for s in UNLABELLED_SUFFIXES) if bucket.exists(k)
    ]
    if len(keys) > 1:
        raise DataError(
            f"{' and '.join(bucket.url(k) for k in keys)} both exist: which are the unlabelled texts?",
            hint=f"keep one: `trainctl data push {lang} FILE --replace` replaces the other",
        )
    return keys[0] if keys else None
