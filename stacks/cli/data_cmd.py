"""`trainctl data push`: stage labelled data, corpus and base LM files in the bucket."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from stacks.cli.common import EnvOpt, LangArg, SetOpt, console, fail, load, mapped_errors
from stacks.errors import ExitStatus
from trainer.data.labelled import UNLABELLED, UNLABELLED_SUFFIXES, LabelledData
from trainer.data.tables import SUFFIX_OF, SUFFIXES, format_of


def _unlabelled_suffix(name: str) -> str | None:
    """`.txt.gz` of `unlabelled.txt.gz` (any case): an unlabelled-texts file name, or None."""
    name = name.lower()
    if name.startswith("unlabeled."):
        fail(f"{name}: unlabelled texts are named unlabelled.*", "rename it, e.g. unlabelled.csv or unlabelled.txt",
             ExitStatus.BAD_INPUT)
    return next((s for s in UNLABELLED_SUFFIXES if name == UNLABELLED + s), None)

app = typer.Typer(help="Stage data in the environment's bucket.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="data")


def _plan_uploads(lang: str, path: Path) -> list[tuple[Path, str]]:
    """(local file, bucket key) pairs: a train file, or a folder with train/valid/test files and corpus/."""
    if path.is_file():
        if suffix := _unlabelled_suffix(path.name):
            return [(path, f"{lang}/data/{UNLABELLED}{suffix}")]
        fmt = format_of(path.name)
        if fmt is None:
            fail(f"{path}: unknown format", "name it train.csv, train.jsonl or train.parquet (unlabelled texts: "
                 "unlabelled.csv|.jsonl|.parquet|.txt|.txt.gz)", ExitStatus.BAD_INPUT)
        name = path.name[: -len(SUFFIX_OF[fmt])]
        role = name if name in ("valid", "test") else "train"  # any other file name is the training data
        return [(path, f"{lang}/data/{role}{SUFFIX_OF[fmt]}")]
    pairs = []
    for name in ("train", "valid", "test"):
        found = [path / f"{name}{suffix}" for suffix in SUFFIXES if (path / f"{name}{suffix}").is_file()]
        if len(found) > 1:
            fail(f"{' and '.join(map(str, found))}: several formats of the same file", "keep one",
                 ExitStatus.BAD_INPUT)
        pairs += [(f, f"{lang}/data/{f.name}") for f in found]
    found = [(f, s) for f in sorted(path.iterdir()) if f.is_file() and (s := _unlabelled_suffix(f.name))]
    if len(found) > 1:
        fail(f"{' and '.join(str(f) for f, _ in found)}: several files of unlabelled texts", "keep one",
             ExitStatus.BAD_INPUT)
    pairs += [(f, f"{lang}/data/{UNLABELLED}{s}") for f, s in found]
    for txt in sorted([*(path / "corpus").glob("*.txt"), *(path / "corpus").glob("*.txt.gz")]):
        pairs.append((txt, f"{lang}/data/corpus/{txt.name}"))
    if (path / "lm").is_dir():  # base LMs are checked and versioned by `lm import`, not copied
        fail(f"{path / 'lm'}: base LMs are not staged with data push",
             f"import them: trainctl lm import {lang} WEIGHTS.pth VOCAB.pkl (checked, versioned, made CURRENT)",
             ExitStatus.BAD_INPUT)
    return pairs


def _ignored_files(folder: Path, pairs: list[tuple[Path, str]]) -> list[str]:
    """What `data push FOLDER` leaves behind: files it does not stage and folders other than corpus/ (names
    relative to the folder), so that a misnamed file is not taken for pushed."""
    staged = {src for src, _ in pairs}
    ignored = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and entry.name == "corpus":
            ignored += [f"corpus/{f.name}" + ("/" if f.is_dir() else "") for f in sorted(entry.iterdir())
                        if f not in staged]
        elif entry not in staged:
            ignored.append(entry.name + ("/" if entry.is_dir() else ""))
    return ignored


def _warn_ignored(folder: Path, ignored: list[str], most: int = 10) -> None:
    if not ignored:
        return
    shown = ", ".join(ignored[:most]) + (f" and {len(ignored) - most} more" if len(ignored) > most else "")
    staged = "train/valid/test.csv|.jsonl|.parquet, unlabelled.*, corpus/*.txt[.gz]"
    warning = f"ignored in {folder} (data push stages {staged} only): {shown}"
    console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)


def _check_texts(pairs: list[tuple[Path, str]], text_col: str) -> None:
    """Corpus and unlabelled files, read through before anything is staged: not gzip, binary or not UTF-8 is
    a DataError (exit 2)."""
    from trainer.data.textfiles import check_text_file, unlabelled_texts

    corpus_files, corpus_lines = 0, 0
    for src, key in pairs:
        if "/data/corpus/" in key:
            with src.open("rb") as stream:
                corpus_lines += check_text_file(stream, src.name, str(src))
            corpus_files += 1
        elif _unlabelled_suffix(key.rsplit("/", 1)[1]):
            texts = unlabelled_texts(src.read_bytes(), src.name, text_col=text_col, source=str(src))
            if not texts:
                fail(f"{src} holds no text", f"one text per line (.txt), or a text column {text_col!r}",
                     ExitStatus.BAD_INPUT)
            console.print(f"{escape(str(src))}: {len(texts)} unlabelled texts "
                          "(LM fine-tuning only, never scored)")
    if corpus_files:
        console.print(f"corpus: {corpus_files} file(s), {corpus_lines} lines (base-LM text)")


def _check_labelled(pairs: list[tuple[Path, str]], d) -> dict[str, LabelledData]:
    """Each train/valid/test file as the trainer will read it -> its rows by role (train, valid, test)."""
    from trainer.data.labelled import parse_labelled

    parsed = {}
    for src, key in pairs:
        if not format_of(key) or "/data/corpus/" in key or _unlabelled_suffix(key.rsplit("/", 1)[1]):
            continue
        role = key.rsplit("/", 1)[1].split(".", 1)[0]
        data = parse_labelled(src.read_bytes(), text_col=d.text_col, label_col=d.label_col,
                              label_sep=d.label_sep, task=d.task, label_cols=tuple(d.label_cols),
                              source=str(src), fmt=format_of(key), whole=role == "train")
        for warning in data.warnings:
            if warning != data.row_summary:  # said on the summary line below
                console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
        n_labels = len(data.label_counts)
        labels = f"{n_labels} label{'s' if n_labels != 1 else ''}"
        labels += " (multi-label)" if data.multi_label else ""
        console.print(f"{escape(str(src))}: {data.row_summary}; {labels}", soft_wrap=True)
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


def _warn_unseen_labels(bucket, lang: str, parsed: dict[str, LabelledData], pairs, d) -> None:
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
            console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)


def _other_formats(bucket, key: str) -> list[str]:
    """Keys of the same data file in another format (train.csv when pushing train.jsonl)."""
    name = key.rsplit("/", 1)[1]
    if "/data/corpus/" not in key and _unlabelled_suffix(name):
        stem = key[: -len(name)] + UNLABELLED
        return [stem + s for s in UNLABELLED_SUFFIXES if stem + s != key and bucket.exists(stem + s)]
    fmt = format_of(key)
    if fmt is None or "/data/corpus/" in key:
        return []
    stem = key[: -len(SUFFIX_OF[fmt])]
    return [stem + suffix for suffix, other in SUFFIXES.items() if other != fmt and bucket.exists(stem + suffix)]


def _warn_stale_splits(bucket, lang: str, pairs) -> None:
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
                console.print(f"[yellow]warning:[/] {bucket.url(key)} from an earlier push stays and {use} "
                              "runs on this data; push a new one, or remove it if it no longer belongs")


@app.command("push")
@mapped_errors
def push(lang: LangArg,
         # \[: rich reads a bare "[valid.* test.*]" as a markup tag and drops it from the help
         path: Annotated[Path, typer.Argument(help="train.csv|.jsonl|.parquet, or a folder with train.* "
                                                   "\\[valid.* test.*], corpus/*.txt[.gz], "
                                                   "unlabelled.csv|.jsonl|.parquet|.txt[.gz]")],
         env: EnvOpt = "local", sets: SetOpt = None,
         replace: Annotated[bool, typer.Option("--replace", help="replace differing files (old ones are kept under data/previous/)")] = False):
    """Validate and upload a language's data to <bucket>/<lang>/."""
    from stacks.runs.language_run import language_settings
    from trainer.storage import open_bucket

    _, config = load(env, sets)
    settings = language_settings(config, lang)
    if not path.exists():
        fail(f"{path} does not exist", "pass a train.csv or a folder holding one", ExitStatus.BAD_INPUT)
    if not (path.is_dir() or path.is_file()):
        fail(f"{path} is neither a data file nor a folder", "pass a train.csv (.jsonl, .parquet) or a folder "
             "holding one", ExitStatus.BAD_INPUT)
    pairs = _plan_uploads(lang, path)
    if not pairs:
        fail(f"nothing to upload in {path} (expected train.csv|.jsonl|.parquet, valid.*, test.*, corpus/*.txt[.gz])",
             "name the data file, or put train.csv (and valid/test, corpus/) in the folder", ExitStatus.BAD_INPUT)
    if path.is_dir():
        _warn_ignored(path, _ignored_files(path, pairs))
    # every file is read through before the bucket is opened: bad input leaves the bucket as it was
    _check_texts(pairs, settings.data.text_col)
    parsed = _check_labelled(pairs, settings.data)
    bucket = open_bucket(config.bucket)
    backups = Backups(bucket, lang)
    conflicts = [(s, k) for s, k in pairs if bucket.exists(k) and bucket.read_bytes(k) != s.read_bytes()]
    # train.jsonl over a train.csv: the old format would leave two candidate files
    conflicts += [(s, other) for s, k in pairs for other in _other_formats(bucket, k)]
    if conflicts and not replace:
        names = ", ".join(bucket.url(k) for _, k in conflicts)
        fail(f"{len(conflicts)} file(s) already in the bucket differ: {names}",
             "rerun with --replace to replace them (the old versions are kept under <lang>/data/previous/)",
             ExitStatus.BAD_INPUT)
    _warn_stale_splits(bucket, lang, pairs)
    _warn_unseen_labels(bucket, lang, parsed, pairs, settings.data)
    uploaded = 0
    for other in [k for _, k in conflicts if k not in dict((k, s) for s, k in pairs)]:
        backup = backups.keep(other)
        bucket.delete(other)
        console.print(f"kept the previous {other} as {backup} (replaced by another format)")
    for src, key in pairs:
        if bucket.exists(key):
            if bucket.read_bytes(key) == src.read_bytes():
                continue
            backup = backups.keep(key)
            console.print(f"kept the previous {key} as {backup}")
        bucket.upload(src, key)
        uploaded += 1
    console.print(f"uploaded {uploaded} file(s), {len(pairs) - uploaded} unchanged, to {bucket.url(lang + '/')}")


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
