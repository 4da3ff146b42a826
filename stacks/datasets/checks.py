"""What `data push` checks before anything is staged: each file read through as the trainer will read it, a chunk
at a time (never held whole), its checksum taken on the way; and the warnings that compare it with what the
bucket already holds. Bad input is a DataError or TrainstackError (exit 2), raised before the bucket is opened."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from stacks.datasets.files import ignored_files, kind_of
from stacks.datasets.report import PushReport
from stacks.errors import TrainstackError
from trainer.data.labelled import LabelledData, data_file, parse_labelled, present_labels, unseen_labels_warning
from trainer.data.tables import SUFFIXES, format_of
from trainer.data.textfiles import check_text_file, count_unlabelled_texts
from trainer.errors import DataError
from trainer.storage.checksums import CHUNK, ChecksummingReader


@contextmanager
def read_through(src: Path, key: str, report: PushReport) -> Iterator[BinaryIO]:
    """`src` opened for its check, its bytes copied on the way into the push's private copy, which is what gets
    uploaded; the check done, its checksum is noted under `key` (what the check did not read is read then), and
    the file's state when it was opened, to tell a change made before the upload."""
    with src.open("rb") as fh, report.private_copy(key) as copy:
        report.opened[key] = file_state(os.fstat(fh.fileno()))
        reader = ChecksummingReader(fh, sink=copy)
        yield io.BufferedReader(reader, buffer_size=CHUNK)
        report.checksums[key] = reader.checksum()


def file_state(st: os.stat_result) -> tuple:
    """What changes whenever a file's bytes do (its ctime cannot be set back)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def read_the_rest(pairs: list[tuple[Path, str]], report: PushReport) -> None:
    """A private copy and checksum of every file no check read (each check reads its own kind)."""
    for src, key in pairs:
        if key not in report.checksums:
            with read_through(src, key, report):
                pass


def refuse_changed(pairs: list[tuple[Path, str]], report: PushReport) -> None:
    """Before anything is written to the bucket: a file changed since its check was opened is refused, as what
    would be staged (the bytes checked) is no longer the file (exit 2, the bucket as it was)."""
    changed = [src for src, key in pairs if not src.is_file() or file_state(src.stat()) != report.opened[key]]
    if changed:
        raise TrainstackError(
            f"{', '.join(map(str, changed))} changed while it was being pushed (after its check began): "
            "nothing was staged",
            hint="push again once the file is written",
        )


def role_of(key: str) -> str:
    """train, valid or test, of a labelled file's key."""
    return key.rsplit("/", 1)[1].split(".", 1)[0]


def warn_ignored(folder: Path, pairs: list[tuple[Path, str]], report: PushReport, most: int = 10) -> None:
    ignored = ignored_files(folder, pairs)
    if not ignored:
        return
    shown = ", ".join(ignored[:most]) + (f" and {len(ignored) - most} more" if len(ignored) > most else "")
    staged = "train/valid/test.csv|.jsonl|.parquet, unlabelled.*, corpus/*.txt[.gz]"
    report.warn(f"ignored in {folder} (data push stages {staged} only): {shown}")


def check_texts(pairs: list[tuple[Path, str]], text_col: str, report: PushReport) -> None:
    """Corpus and unlabelled files, read through: not gzip, binary or not UTF-8 is a DataError (exit 2)."""
    corpus_files, corpus_lines = 0, 0
    for src, key in pairs:
        if kind_of(key) == "corpus":
            with read_through(src, key, report) as stream:
                lines = check_text_file(stream, src.name, str(src))
            report.note(key, lines=lines)
            corpus_files, corpus_lines = corpus_files + 1, corpus_lines + lines
        elif kind_of(key) == "unlabelled":
            with read_through(src, key, report) as stream:
                texts = count_unlabelled_texts(stream, src.name, text_col=text_col, source=str(src))
            if not texts:
                raise TrainstackError(
                    f"{src} holds no text", hint=f"one text per line (.txt), or a text column {text_col!r}"
                )
            report.note(key, texts=texts)
            report.say(f"{src}: {texts} unlabelled texts (LM fine-tuning only, never scored)")
    if corpus_files:
        report.say(f"corpus: {corpus_files} file(s), {corpus_lines} lines (base-LM text)")


def check_labelled(pairs: list[tuple[Path, str]], d, report: PushReport) -> dict[str, LabelledData]:
    """Each train/valid/test file as the trainer will read it (`d`: the language's data settings) -> its counts
    by role (train, valid, test); the rows themselves are not kept."""
    parsed = {}
    for src, key in pairs:
        if not format_of(key) or kind_of(key) != "labelled":
            continue
        role = role_of(key)
        with read_through(src, key, report) as stream:
            data = parse_labelled(
                stream,
                text_col=d.text_col,
                label_col=d.label_col,
                label_sep=d.label_sep,
                task=d.task,
                label_cols=tuple(d.label_cols),
                source=str(src),
                fmt=format_of(key),
                whole=role == "train",
                keep_rows=False,
            )
        for warning in data.warnings:
            if warning != data.row_summary:  # said on the summary line below
                report.warn(warning)
        n_labels = len(data.label_counts)
        labels = f"{n_labels} label{'s' if n_labels != 1 else ''}" + (" (multi-label)" if data.multi_label else "")
        report.say(f"{src}: {data.row_summary}; {labels}")
        report.note(
            key,
            labels=n_labels,
            rows={
                "total": data.total_rows,
                "kept": data.kept_rows,
                "dropped": data.total_rows - data.kept_rows,
                "skipped": {why: len(lines) for why, lines in data.skipped.items()},
            },
        )
        parsed[role] = data
    return parsed


def staged_train_labels(bucket, lang: str, d) -> set[str] | None:
    """The labels of the training data already in the bucket; None when there is none, or it does not read."""
    try:
        key = data_file(bucket, lang, "train")
        if key is None:
            return None
        with bucket.open_read(key) as stream:
            data = parse_labelled(
                stream,
                text_col=d.text_col,
                label_col=d.label_col,
                label_sep=d.label_sep,
                task=d.task,
                label_cols=tuple(d.label_cols),
                source=bucket.url(key),
                fmt=format_of(key),
                keep_rows=False,
            )
    except DataError:  # its own push said why; train's preflight says it again
        return None
    return present_labels(data)


def warn_unseen_labels(
    bucket, lang: str, parsed: dict[str, LabelledData], pairs: list[tuple[Path, str]], d, report: PushReport
) -> None:
    """valid/test labels the training data (pushed now, or already staged) never has."""
    extras = [(role, data) for role, data in parsed.items() if role != "train"]
    if not extras:
        return
    train = present_labels(parsed["train"]) if "train" in parsed else staged_train_labels(bucket, lang, d)
    if train is None:
        return
    sources = {role_of(key): str(src) for src, key in pairs}
    for role, data in extras:
        if (warning := unseen_labels_warning(train, data, sources[role])) is not None:
            report.warn(warning)


def warn_stale_splits(bucket, lang: str, pairs: list[tuple[Path, str]], report: PushReport) -> None:
    """New training data with a valid/test file left from an earlier push: say that it stays in use."""
    stems = {k.rsplit(".", 1)[0] for _, k in pairs}
    if f"{lang}/data/train" not in stems:
        return
    for role in ("valid", "test"):
        if f"{lang}/data/{role}" in stems:
            continue
        for key in (f"{lang}/data/{role}{suffix}" for suffix in SUFFIXES):
            if bucket.exists(key):
                use = "tunes the thresholds of" if role == "valid" else "scores"
                report.warn(
                    f"{bucket.url(key)} from an earlier push stays and {use} runs on this data; "
                    "push a new one, or remove it if it no longer belongs"
                )
