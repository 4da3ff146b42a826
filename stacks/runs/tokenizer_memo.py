"""What a tokenizer check already proved on this machine, so `trainctl train` does not prove it again.

The check (trainer.text.preflight.check_tokenizer) imports spaCy and fastai and builds the language's tokenizer:
about 8 CPU-seconds of the ~14 before "data ok" (spaCy's French rules alone compile for ~3 s), paid by every
`train` of unchanged data. A success is remembered under the user's cache folder, keyed by everything its outcome
depends on: the tokenizer and language, the sampled texts, the interpreter and every installed distribution's
version. Anything else (a failure, a new package, other rows) checks again."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path


def _folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainstack" / "tokenizer-checks"


def _installed() -> list[str]:
    from importlib.metadata import distributions

    return sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions())


def key_of(kind: str, code: str, texts: list[str]) -> str:
    digest = hashlib.sha256()
    for part in (kind, code, sys.executable, sys.version, *_installed(), "\0texts", *texts):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()


def remembered(key: str) -> int | None:
    """The token count of an earlier success with this key, or None."""
    try:
        return int((_folder() / key).read_text())
    except (OSError, ValueError):
        return None


def remember(key: str, tokens: int) -> None:
    """Best effort: a cache folder that cannot be written only means checking again next time."""
    folder = _folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        part = folder / f".{key}.{os.getpid()}"
        part.write_text(str(tokens))
        os.replace(part, folder / key)
    except OSError:
        pass
