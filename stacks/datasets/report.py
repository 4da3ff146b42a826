"""What one push does, said as it goes (through the caller's PushListener) and kept for `--json`."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from stacks.datasets.files import kind_of
from trainer.storage.checksums import Checksum


class UploadProgress(Protocol):
    def file(self, name: str, size: int) -> AbstractContextManager[Callable[[int], None]]:
        """One file going up; the callable hears the bytes sent so far."""


class PushListener(Protocol):
    def say(self, line: str) -> None:
        """A line of what the push does (plain text)."""

    def warn(self, text: str) -> None:
        """A warning: something the push leaves as it is, but that may be a mistake."""

    def progress(self, total_bytes: int) -> AbstractContextManager[UploadProgress]:
        """The uploads of one push, `total_bytes` in all."""


class PushReport:
    """Each file with its key and facts, what was replaced, every warning; `checksums`: each local file's, taken
    as its check read it."""

    def __init__(self, pairs: list[tuple[Path, str]], listener: PushListener):
        self.files = {
            key: {
                "source": str(src),
                "key": key,
                "url": None,
                "kind": kind_of(key),
                "action": None,
                "backup": None,
                "rows": None,
                "labels": None,
                "texts": None,
                "lines": None,
            }
            for src, key in pairs
        }
        self.replaced: list[dict] = []
        self.active_runs: list[dict] = []  # {run_id, state, trains_on: "own copy" | "this push"}
        self.warnings: list[str] = []
        self.checksums: dict[str, Checksum] = {}
        self.listener = listener
        self.bucket_url: str | None = None  # the language's folder in the bucket, once it is opened

    def say(self, line: str) -> None:
        self.listener.say(line)

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        self.listener.warn(text)

    def note(self, key: str, **facts) -> None:
        self.files[key].update(facts)

    def document(self, lang: str) -> dict:
        """`data push --json`'s document."""
        return {
            "lang": lang,
            "bucket": self.bucket_url,
            "files": list(self.files.values()),
            "replaced": self.replaced,
            "active_runs": self.active_runs,
            "warnings": self.warnings,
        }


def size_text(n: float) -> str:
    """Bytes as a line says them: 812 B, 12.3 kB, 4.0 MB."""
    unit = "B"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            break
        n /= 1000
    return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
