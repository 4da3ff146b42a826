"""`trainctl data push`: stage labelled data, corpus and base LM files in the bucket."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from stacks.cli.common import (EnvOpt, LangArg, SetOpt, console, emit_json, fail, json_on_stdout, load,
                               mapped_errors)
from stacks.cli.data_files import ignored_files, kind_of, other_formats, plan_uploads
from stacks.errors import ExitStatus
from trainer.data.labelled import LabelledData
from trainer.data.tables import SUFFIXES, format_of

app = typer.Typer(help="Stage data in the environment's bucket.", no_args_is_help=True)

PushJsonOpt = Annotated[bool, typer.Option("--json", help=(
    "print JSON on stdout once staged, the lines on stderr: {lang, bucket, files, replaced, warnings}; "
    "files: one {source, key, url, kind, action, backup, rows, labels, texts, lines} per file (kind: "
    "labelled, unlabelled or corpus; action: uploaded or unchanged; backup: where the version it replaced "
    "is kept, else null; rows: labelled files' {total, kept, dropped, skipped: {why: count}}; labels: their "
    "label count; texts: an unlabelled file's; lines: a corpus file's); replaced: {key, backup} of another "
    "format's file removed"))]


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="data")


class PushReport:
    """What one push does, said as it goes (on stderr with --json) and kept for `--json`: each file with its
    key and facts, what was replaced, every warning."""

    def __init__(self, pairs: list[tuple[Path, str]]):
        self.files = {key: {"source": str(src), "key": key, "url": None, "kind": kind_of(key), "action": None,
                            "backup": None, "rows": None, "labels": None, "texts": None, "lines": None}
                      for src, key in pairs}
        self.replaced: list[dict] = []
        self.warnings: list[str] = []

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        console.print(f"[yellow]warning:[/] {escape(text)}", soft_wrap=True)

    def note(self, key: str, **facts) -> None:
        self.files[key].update(facts)

    def document(self, lang: str, bucket) -> dict:
        return {"lang": lang, "bucket": bucket.url(lang + "/"), "files": list(self.files.values()),
                "replaced": self.replaced, "warnings": self.warnings}


def _warn_ignored(folder: Path, ignored: list[str], report: PushReport, most: int = 10) -> None:
    if not ignored:
        return
    shown = ", ".join(ignored[:most]) + (f" and {len(ignored) - most} more" if len(ignored) > most else "")
    staged = "train/valid/test.csv|.jsonl|.parquet, unlabelled.*, corpus/*.txt[.gz]"
    report.warn(f"ignored in {folder} (data push stages {staged} only): {shown}")


def _check_texts(pairs: list[tuple[Path, str]], text_col: str, report: PushReport) -> None:
    """Corpus and unlabelled files, read through before anything is staged: not gzip, binary or not UTF-8 is
    a DataError (exit 2)."""
    from trainer.data.textfiles import check_text_file, unlabelled_texts

    corpus_files, corpus_lines = 0, 0
    for src, key in pairs:
        if kind_of(key) == "corpus":
            with src.open("rb") as stream:
                lines = check_text_file(stream, src.name, str(src))
            report.note(key, lines=lines)
            corpus_files, corpus_lines = corpus_files + 1, corpus_lines + lines
        elif kind_of(key) == "unlabelled":
            texts = unlabelled_texts(src.read_bytes(), src.name, text_col=text_col, source=str(src))
            if not texts:
                fail(f"{src} holds no text", f"one text per line (.txt), or a text column {text_col!r}",
                     ExitStatus.BAD_INPUT)
            report.note(key, texts=len(texts))
            console.print(f"{escape(str(src))}: {len(texts)} unlabelled texts "
                          "(LM fine-tuning only, never scored)")
    if corpus_files:
        console.print(f"corpus: {corpus_files} file(s), {corpus_lines} lines (base-LM text)")


def _check_labelled(pairs: list[tuple[Path, str]], d, report: PushReport) -> dict[str, LabelledData]:
    """Each train/valid/test file as the trainer will read it -> its rows by role (train, valid, test)."""
    from trainer.data.labelled import parse_labelled

    parsed = {}
    for src, key in pairs:
        if not format_of(key) or kind_of(key) != "labelled":
            continue
        role = key.rsplit("/", 1)[1].split(".", 1)[0]
        data = parse_labelled(src.read_bytes(), text_col=d.text_col, label_col=d.label_col,
                              label_sep=d.label_sep, task=d.task, label_cols=tuple(d.label_cols),
                              source=str(src), fmt=format_of(key), whole=role == "train")
        for warning in data.warnings:
            if warning != data.row_summary:  # said on the summary line below
                report.warn(warning)
        n_labels = len(data.label_counts)
        labels = f"{n_labels} label{'s' if n_labels != 1 else ''}"
        labels += " (multi-label)" if data.multi_label else ""
        console.print(f"{escape(str(src))}: {data.row_summary}; {labels}", soft_wrap=True)
        report.note(key, labels=n_labels, rows={
            "total": data.total_rows, "kept": len(data.texts), "dropped": data.total_rows - len(data.texts),
            "skipped": {why: len(lines) for why, lines in data.skipped.items()}})
        parsed[role] = data
    return parsed


def _staged_train_labels(bucket, lang: str, d) -> set[str] | None:
    """The labels of the training data already in the bucket; None when there is none, or it does not read."""
    from trainer.data.labelled import data_file, parse_labelled, present_labels
    from trainer.errors import DataError

    try:
        key = data_file(bucket, lang, "train")
        if key is None:
            return None
        data = parse_labelled(bucket.read_bytes(key), text_col=d.text_col, label_col=d.label_col,
                              label_sep=d.label_sep, task=d.task, label_cols=tuple(d.label_cols),
                              source=bucket.url(key), fmt=format_of(key))
    except DataError:  # its own push said why; train's preflight says it again
        return None
    return present_labels(data)


def _warn_unseen_labels(bucket, lang: str, parsed: dict[str, LabelledData], pairs, d,
                        report: PushReport) -> None:
    """valid/test labels the training data (pushed now, or already staged) never has."""
    from trainer.data.labelled import present_labels, unseen_labels_warning

    extras = [(role, data) for role, data in parsed.items() if role != "train"]
    if not extras:
        return
    train = present_labels(parsed["train"]) if "train" in parsed else _staged_train_labels(bucket, lang, d)
    if train is None:
        return
    sources = {key.rsplit("/", 1)[1].split(".", 1)[0]: str(src) for src, key in pairs}
    for role, data in extras:
        if (warning := unseen_labels_warning(train, data, sources[role])) is not None:
            report.warn(warning)


def _warn_stale_splits(bucket, lang: str, pairs, report: PushReport) -> None:
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
                report.warn(f"{bucket.url(key)} from an earlier push stays and {use} runs on this data; "
                            "push a new one, or remove it if it no longer belongs")


@app.command("push")
@mapped_errors
def push(lang: LangArg,
         # \[: rich reads a bare "[valid.* test.*]" as a markup tag and drops it from the help
         path: Annotated[Path, typer.Argument(help="train.csv|.jsonl|.parquet, or a folder with train.* "
                                                   "\\[valid.* test.*], corpus/*.txt[.gz], "
                                                   "unlabelled.csv|.jsonl|.parquet|.txt[.gz]")],
         env: EnvOpt = "local", sets: SetOpt = None,
         replace: Annotated[bool, typer.Option(
             "--replace", help="replace differing files (old ones are kept under data/previous/)")] = False,
         as_json: PushJsonOpt = False):
    """Validate and upload a language's data to <bucket>/<lang>/: a line per file staged (and on a terminal a
    bar of the bytes staged)."""
    from stacks.runs.language_run import language_settings

    _, config = load(env, sets)
    settings = language_settings(config, lang)
    if not path.exists():
        fail(f"{path} does not exist", "pass a train.csv or a folder holding one", ExitStatus.BAD_INPUT)
    if not (path.is_dir() or path.is_file()):
        fail(f"{path} is neither a data file nor a folder", "pass a train.csv (.jsonl, .parquet) or a folder "
             "holding one", ExitStatus.BAD_INPUT)
    pairs = plan_uploads(lang, path)
    if not pairs:
        fail(f"nothing to upload in {path} (expected train.csv|.jsonl|.parquet, valid.*, test.*, corpus/*.txt[.gz])",
             "name the data file, or put train.csv (and valid/test, corpus/) in the folder", ExitStatus.BAD_INPUT)
    report = PushReport(pairs)
    with json_on_stdout(as_json):
        bucket = _push(lang, path, pairs, config, settings, replace, report)
    if as_json:
        emit_json(report.document(lang, bucket))


def _push(lang: str, path: Path, pairs, config, settings, replace: bool, report: PushReport):
    """Check every file, then stage them -> the bucket."""
    from trainer.storage import open_bucket

    if path.is_dir():
        _warn_ignored(path, ignored_files(path, pairs), report)
    # every file is read through before the bucket is opened: bad input leaves the bucket as it was
    _check_texts(pairs, settings.data.text_col, report)
    parsed = _check_labelled(pairs, settings.data, report)
    bucket = open_bucket(config.bucket)
    conflicts = [(s, k) for s, k in pairs if bucket.exists(k) and bucket.read_bytes(k) != s.read_bytes()]
    # train.jsonl over a train.csv: the old format would leave two candidate files
    conflicts += [(s, other) for s, k in pairs for other in other_formats(bucket, k)]
    if conflicts and not replace:
        names = ", ".join(bucket.url(k) for _, k in conflicts)
        fail(f"{len(conflicts)} file(s) already in the bucket differ: {names}",
             "rerun with --replace to replace them (the old versions are kept under <lang>/data/previous/)",
             ExitStatus.BAD_INPUT)
    _warn_stale_splits(bucket, lang, pairs, report)
    _warn_unseen_labels(bucket, lang, parsed, pairs, settings.data, report)
    backups = Backups(bucket, lang)
    for other in [k for _, k in conflicts if k not in report.files]:
        backup = backups.keep(other)
        bucket.delete(other)
        report.replaced.append({"key": other, "backup": backup})
        console.print(f"kept the previous {other} as {backup} (replaced by another format)")
    _stage(bucket, pairs, backups, report)
    uploaded = sum(1 for f in report.files.values() if f["action"] == "uploaded")
    console.print(f"uploaded {uploaded} file(s), {len(pairs) - uploaded} unchanged, to {bucket.url(lang + '/')}")
    return bucket


def _stage(bucket, pairs, backups: "Backups", report: PushReport) -> None:
    """Upload each file that differs from the bucket's (its old version kept first): a line per file."""
    from stacks.cli.file_progress import FileProgress

    sizes = {key: src.stat().st_size for src, key in pairs}
    with FileProgress(sum(sizes.values())) as progress:
        for src, key in pairs:
            with progress.file(key, sizes[key]):
                backup = None
                if bucket.exists(key):
                    if bucket.read_bytes(key) == src.read_bytes():
                        report.note(key, action="unchanged", url=bucket.url(key))
                        console.print(f"unchanged {key}", markup=False, soft_wrap=True)
                        continue
                    backup = backups.keep(key)
                    console.print(f"kept the previous {key} as {backup}", markup=False, soft_wrap=True)
                bucket.upload(src, key)
            report.note(key, action="uploaded", url=bucket.url(key), backup=backup)
            console.print(f"staged {key} ({_size(sizes[key])})", markup=False, soft_wrap=True)


def _size(n: float) -> str:
    """Bytes as a line says them: 812 B, 12.3 kB, 4.0 MB."""
    unit = "B"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            break
        n /= 1000
    return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"


class Backups:
    """Where one push keeps the versions it replaces: `<lang>/data/previous/<UTC time>-<suffix>/`, a folder of its
    own (microseconds and a random suffix), each copy written only where nothing is (never over an earlier
    backup, whatever the clock says)."""

    def __init__(self, bucket, lang: str):
        self.bucket, self.lang, self.folder = bucket, lang, None

    def _new_folder(self) -> str:
        import secrets

        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S.%f")
        return f"{self.lang}/data/previous/{stamp}-{secrets.token_hex(3)}/"

    def keep(self, key: str) -> str:
        """Copy `key` into this push's folder -> the backup's key."""
        data = self.bucket.read_bytes(key)
        for _ in range(5):
            self.folder = self.folder or self._new_folder()
            backup = self.folder + key[len(self.lang) + 1:]
            if self.bucket.write_bytes(backup, data, if_absent=True):
                return backup
            self.folder = None  # taken: another push used the same name
        raise RuntimeError(f"could not find a free backup folder for {key} under {self.lang}/data/previous/")
