"""Which local files `trainctl data push` stages, under which bucket keys (and what it leaves behind)."""

from __future__ import annotations

import os
from pathlib import Path

from stacks.errors import TrainstackError
from trainer.data.labelled import UNLABELLED, UNLABELLED_SUFFIXES
from trainer.data.tables import SUFFIX_OF, SUFFIXES, format_of


def kind_of(key: str) -> str:
    """corpus (base-LM text), unlabelled (LM fine-tuning texts) or labelled (train/valid/test)."""
    if "/data/corpus/" in key:
        return "corpus"
    return "unlabelled" if unlabelled_suffix(key.rsplit("/", 1)[1]) else "labelled"


def unlabelled_suffix(name: str) -> str | None:
    """`.txt.gz` of `unlabelled.txt.gz` (any case): an unlabelled-texts file name, or None."""
    name = name.lower()
    if name.startswith("unlabeled."):
        raise TrainstackError(
            f"{name}: unlabelled texts are named unlabelled.*", hint="rename it, e.g. unlabelled.csv or unlabelled.txt"
        )
    return next((s for s in UNLABELLED_SUFFIXES if name == UNLABELLED + s), None)


def plan_uploads(lang: str, path: Path) -> list[tuple[Path, str]]:
    """(local file, bucket key) pairs: a train file, or a folder with train/valid/test files and corpus/."""
    if path.is_file():
        if suffix := unlabelled_suffix(path.name):
            return [(path, f"{lang}/data/{UNLABELLED}{suffix}")]
        fmt = format_of(path.name)
        if fmt is None:
            raise TrainstackError(
                f"{path}: unknown format",
                hint="name it train.csv, train.jsonl or train.parquet "
                "(unlabelled texts: unlabelled.csv|.jsonl|.parquet|.txt|.txt.gz)",
            )
        name = path.name[: -len(SUFFIX_OF[fmt])]
        role = name if name in ("valid", "test") else "train"  # any other file name is the training data
        return [(path, f"{lang}/data/{role}{SUFFIX_OF[fmt]}")]
    pairs = []
    for name in ("train", "valid", "test"):
        found = [path / f"{name}{suffix}" for suffix in SUFFIXES if (path / f"{name}{suffix}").is_file()]
        if len(found) > 1:
            raise TrainstackError(f"{' and '.join(map(str, found))}: several formats of the same file", hint="keep one")
        pairs += [(f, f"{lang}/data/{f.name}") for f in found]
    found = [(f, s) for f in sorted(path.iterdir()) if f.is_file() and (s := unlabelled_suffix(f.name))]
    if len(found) > 1:
        raise TrainstackError(
            f"{' and '.join(str(f) for f, _ in found)}: several files of unlabelled texts", hint="keep one"
        )
    pairs += [(f, f"{lang}/data/{UNLABELLED}{s}") for f, s in found]
    for txt in sorted([*(path / "corpus").glob("*.txt"), *(path / "corpus").glob("*.txt.gz")]):
        if not txt.is_file():  # a link to nothing (or to itself): globbed, but there is no file to read
            raise TrainstackError(
                f"{txt} is a link to {os.readlink(txt) if txt.is_symlink() else 'no file'}, which cannot be read",
                hint="point the link at the file, or remove it from the folder",
            )
        pairs.append((txt, f"{lang}/data/corpus/{txt.name}"))
    if (path / "lm").is_dir():  # base LMs are checked and versioned by `lm import`, not copied
        raise TrainstackError(
            f"{path / 'lm'}: base LMs are not staged with data push",
            hint=f"import them: trainctl lm import {lang} WEIGHTS.pth VOCAB.pkl (checked, versioned, made CURRENT)",
        )
    return pairs


def ignored_files(folder: Path, pairs: list[tuple[Path, str]]) -> list[str]:
    """What `data push FOLDER` leaves behind: files it does not stage and folders other than corpus/ (names
    relative to the folder), so that a misnamed file is not taken for pushed."""
    staged = {src for src, _ in pairs}
    ignored = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and entry.name == "corpus":
            ignored += [
                f"corpus/{f.name}" + ("/" if f.is_dir() else "") for f in sorted(entry.iterdir()) if f not in staged
            ]
        elif entry not in staged:
            ignored.append(entry.name + ("/" if entry.is_dir() else ""))
    return ignored


def other_formats(bucket, key: str) -> list[str]:
    """Keys of the same data file in another format (train.csv when pushing train.jsonl)."""
    name = key.rsplit("/", 1)[1]
    if "/data/corpus/" not in key and unlabelled_suffix(name):
        stem = key[: -len(name)] + UNLABELLED
        return [stem + s for s in UNLABELLED_SUFFIXES if stem + s != key and bucket.exists(stem + s)]
    fmt = format_of(key)
    if fmt is None or "/data/corpus/" in key:
        return []
    stem = key[: -len(SUFFIX_OF[fmt])]
    return [stem + suffix for suffix, other in SUFFIXES.items() if other != fmt and bucket.exists(stem + suffix)]
