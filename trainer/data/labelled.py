"""Read and validate labelled data (`<lang>/data/train.csv`, `.jsonl` or `.parquet`) without heavy imports.

trainctl runs the same checks as a preflight, so bad data fails before any
infrastructure is created or anything is written under `runs/`.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from trainer.errors import DataError
from trainer.data.tables import SUFFIXES, cell_text, flag, format_of, label_list, read_table

DATA_PREFIX = "{lang}/data/"
SPLIT_FILES = ("valid", "test")  # beside train.<fmt>; their rows are marked with the file's name
SPLIT_COL = "split"
SPLIT_VALUES = ("train", "valid", "test")
CORPUS_PREFIX = "{lang}/data/corpus/"
CORPUS_SUFFIXES = (".txt", ".txt.gz")
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
    sha256: str = ""
    splits: list[str | None] = field(default_factory=list)  # per row: train/valid/test from the data, or None
    lines: list[int] = field(default_factory=list)  # per row: its line (row) number in the file, for messages

    @property
    def label_names(self) -> list[str]:
        return sorted(self.label_counts)

    @property
    def has_unlabelled(self) -> bool:
        """Rows with no label (all-zero label columns): predictions may then be empty too."""
        return any(not tags for tags in self.labels)


MULTI_LABEL_WARN_SHARE = 0.01  # auto: a multi-label task this rare is more likely a data error


def _decide_task(data: "LabelledData", task: str, source: str, label_how: str) -> None:
    # several labels, or none (possible with label columns): either way not single-label
    multi_rows = [data.lines[i] for i, tags in enumerate(data.labels) if len(tags) != 1]
    shown = ", ".join(map(str, multi_rows[:10])) + (" …" if len(multi_rows) > 10 else "")
    if task == "single_label" and multi_rows:
        raise DataError(f"{source}: data.task is single_label but {len(multi_rows)} row(s) have several labels "
                        f"or none ({label_how}), lines {shown}",
                        hint="fix those rows, or set data.task: multi_label (or auto)")
    data.multi_label = task == "multi_label" or bool(multi_rows)
    if task == "auto" and multi_rows and len(multi_rows) < MULTI_LABEL_WARN_SHARE * len(data.labels):
        data.warnings.append(
            f"multi-label because {len(multi_rows)} of {len(data.labels)} rows (under 1 %) have several labels "
            f"(lines {shown}); set data.task: single_label to refuse them, or multi_label to confirm")


def _row_labels(row: dict, n: int, *, label_col: str, label_sep: str, label_cols: tuple[str, ...],
                source: str) -> list[str]:
    if label_cols:
        tags = []
        for col in label_cols:
            value = flag(row.get(col))
            if value is None:
                raise DataError(f"{source} line {n}: label column {col!r} holds {row.get(col)!r}, not 0/1",
                                hint="label columns (data.label_cols) hold 1 when the label applies, else 0 "
                                     "(true/false and empty cells are accepted too)")
            if value:
                tags.append(col)
        return tags
    tags = label_list(row.get(label_col), label_sep)
    if tags is None:
        raise DataError(f"{source} line {n}: the {label_col!r} value {row.get(label_col)!r} is not a label, "
                        "a list of labels or labels separated by " + repr(label_sep),
                        hint='write e.g. "billing", "billing;delivery" or ["billing", "delivery"]')
    return tags


def parse_labelled(raw: bytes, *, text_col: str, label_col: str, label_sep: str, source: str,
                   task: str = "auto", label_cols: tuple[str, ...] = (), fmt: str = "csv",
                   whole: bool = True) -> LabelledData:
    """Validated rows of one labelled-data file (`fmt`: csv, jsonl or parquet); `whole=False` for
    a valid/test file, which may hold a single label and rare ones (the train file is the whole).

    Labels come from `label_col` (a separated string or a list) or, when `label_cols`
    is given, from one 0/1 column per label; a row whose label columns are all 0 is kept
    as a row with no label (multi-label), where an empty `label_col` cell is skipped."""
    table = read_table(raw, fmt, source)
    columns = table.columns
    label_cols = tuple(label_cols)
    missing = [c for c in (text_col, *(label_cols or (label_col,))) if c not in columns]
    if missing:
        which = "data.label_cols" if label_cols and text_col not in missing else "data.text_col / data.label_col"
        raise DataError(
            f"{source} has no column {', '.join(repr(c) for c in missing)} (columns: {', '.join(columns) or 'none'})",
            hint=f"rename the column or set {which} (e.g. --set defaults.data.label_col=category)",
        )
    row_ids, texts, labels, marks, lines = [], [], [], [], []
    skipped = 0
    counts: Counter = Counter()
    has_split = SPLIT_COL in columns and SPLIT_COL not in (text_col, label_col, *label_cols)
    for i, (n, row) in enumerate(table.rows):
        try:
            body = cell_text(row.get(text_col)).strip()
        except TypeError:
            raise DataError(f"{source} line {n}: the {text_col!r} value is a {type(row.get(text_col)).__name__}, "
                            "not text", hint=f"the {text_col!r} column must hold strings") from None
        tags = _row_labels(row, n, label_col=label_col, label_sep=label_sep, label_cols=label_cols, source=source)
        if not body or (not tags and not label_cols):
            skipped += 1
            continue
        tags = sorted(set(tags))
        raw_mark = row.get(SPLIT_COL) if has_split else None
        mark = cell_text(raw_mark).strip().lower() or None if isinstance(raw_mark, (str, type(None))) else "?"
        if mark is not None and mark not in SPLIT_VALUES:
            raise DataError(f"{source} line {n}: split {raw_mark!r} is not one of "
                            f"{', '.join(SPLIT_VALUES)}", hint="fix the value, or leave it empty for train")
        marks.append(mark)
        lines.append(n)
        row_ids.append(i)
        texts.append(body)
        labels.append(tags)
        counts.update(tags)
    if not texts:
        label_what = "label columns" if label_cols else f"{label_col!r} column"
        raise DataError(
            f"{source} has no usable rows ({skipped} rows with empty text or label)",
            hint=f"fill the {text_col!r} and {label_what}",
        )
    if label_cols:
        counts.update({c: 0 for c in label_cols})  # a label column with no positive row is still a label
    if len(counts) < 2 and whole:
        raise DataError(f"{source} has a single label ({next(iter(counts), None)!r}): nothing to classify",
                        hint="provide examples of at least two labels")
    data = LabelledData(
        row_ids=row_ids, texts=texts, labels=labels, label_counts=counts,
        multi_label=any(len(t) != 1 for t in labels), skipped_empty=skipped,
        sha256=hashlib.sha256(raw).hexdigest(), splits=marks, lines=lines,
    )
    _decide_task(data, task, source, "label columns" if label_cols else repr(label_sep))
    if skipped:
        data.warnings.append(f"skipped {skipped} row(s) with empty text or label")
    rare = sorted(lbl for lbl, n in counts.items() if n < MIN_EXAMPLES_PER_LABEL) if whole else []
    if rare:
        data.warnings.append(
            f"label(s) with fewer than {MIN_EXAMPLES_PER_LABEL} examples: {', '.join(rare)} "
            "(they cannot appear in both training and validation; metrics for them are unreliable)"
        )
    return data


def parse_labelled_csv(raw: bytes, **kwargs) -> LabelledData:
    return parse_labelled(raw, fmt="csv", **kwargs)


def corpus_keys(bucket, lang: str) -> list[str]:
    """The corpus files: `.txt` and `.txt.gz` objects under `<lang>/data/corpus/`, sorted."""
    return sorted(k for k in bucket.list(CORPUS_PREFIX.format(lang=lang)) if k.endswith(CORPUS_SUFFIXES))


def data_file(bucket, lang: str, name: str) -> str | None:
    """The key of `<lang>/data/<name>.csv|.jsonl|.parquet`, None if absent; two formats at once are refused."""
    keys = [k for k in (f"{DATA_PREFIX.format(lang=lang)}{name}{suffix}" for suffix in SUFFIXES) if bucket.exists(k)]
    if len(keys) > 1:
        raise DataError(f"{' and '.join(bucket.url(k) for k in keys)} both exist: which one is the data?",
                        hint=f"keep one: `trainctl data push {lang} FILE --replace` replaces the other")
    return keys[0] if keys else None


def load_labelled(bucket, lang: str, *, text_col: str, label_col: str, label_sep: str,
                  task: str = "auto", label_cols: tuple[str, ...] = ()) -> tuple[LabelledData, bytes]:
    """train.<fmt> plus valid.<fmt> / test.<fmt> beside it (their rows marked), validated alike.

    Returns the data and the raw bytes of every file read (for the run's data hash)."""
    key = data_file(bucket, lang, "train")
    if key is None:
        raise DataError(f"no labelled data at {bucket.url(DATA_PREFIX.format(lang=lang) + 'train.csv')} "
                        "(or .jsonl, .parquet)",
                        hint=f"stage it first: trainctl data push {lang} PATH/TO/train.csv")
    opts = dict(text_col=text_col, label_col=label_col, label_sep=label_sep, task=task, label_cols=tuple(label_cols))
    raw = bucket.read_bytes(key)
    data = parse_labelled(raw, source=bucket.url(key), fmt=format_of(key), **opts)
    split_column = any(m is not None for m in data.splits)  # before valid/test rows are marked
    for mark in SPLIT_FILES:
        extra_key = data_file(bucket, lang, mark)
        if extra_key is None:
            continue
        if split_column:
            raise DataError(f"{bucket.url(key)} has a {SPLIT_COL!r} column and {bucket.url(extra_key)} exists too",
                            hint=f"use one way to give the split: the column, or the {mark} file")
        extra_raw = bucket.read_bytes(extra_key)
        extra = (parse_labelled(extra_raw, source=bucket.url(extra_key), fmt=format_of(extra_key), whole=False,
                                **opts)
                 if extra_raw.strip() else None)
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
        data.warnings += extra.warnings
    return data, raw


UNLABELLED = "unlabelled"  # <lang>/data/unlabelled.<fmt>: in-domain texts for LM fine-tuning, never scored
UNLABELLED_SUFFIXES = (*SUFFIXES, *CORPUS_SUFFIXES)


def unlabelled_key(bucket, lang: str) -> str | None:
    """The key of `<lang>/data/unlabelled.csv|.jsonl|.parquet|.txt|.txt.gz`, None if absent; two are refused."""
    keys = [k for k in (f"{DATA_PREFIX.format(lang=lang)}{UNLABELLED}{s}" for s in UNLABELLED_SUFFIXES)
            if bucket.exists(k)]
    if len(keys) > 1:
        raise DataError(f"{' and '.join(bucket.url(k) for k in keys)} both exist: which are the unlabelled texts?",
                        hint=f"keep one: `trainctl data push {lang} FILE --replace` replaces the other")
    return keys[0] if keys else None


def unlabelled_texts(raw: bytes, name: str, *, text_col: str, source: str) -> list[str]:
    """The non-empty texts of an unlabelled file: one per line (.txt, .txt.gz) or the text column of a table."""
    import gzip
    import io

    name = name.lower()
    if name.endswith(CORPUS_SUFFIXES):
        stream = gzip.GzipFile(fileobj=io.BytesIO(raw)) if name.endswith(".gz") else io.BytesIO(raw)
        try:  # lines end at \n, \r or \r\n only, as corpus files do (str.splitlines also breaks at U+2028 ...)
            lines = [line.strip() for line in io.TextIOWrapper(stream, encoding="utf-8-sig", errors="replace")]
        except (OSError, EOFError) as exc:
            raise DataError(f"{source} is not a readable gzip file: {exc}", hint="gzip it again, or push it as .txt") from exc
        return [line for line in lines if line]
    table = read_table(raw, format_of(name), source)
    if text_col not in table.columns:
        raise DataError(f"{source} has no text column {text_col!r} (columns: {', '.join(table.columns) or 'none'})",
                        hint="name the column like the labelled data's (data.text_col), or push it as .txt, "
                             "one text per line")
    return [t for t in (cell_text(row.get(text_col)).strip() for _, row in table.rows) if t]
