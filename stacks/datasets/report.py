"""What one push does, said as it goes (through the caller's PushListener) and kept for `--json`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol

from stacks.datasets.files import kind_of
from stacks.errors import TrainstackError
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
    as its check read it; `copies`: the private copy of each (in `private`, a folder of the push's own) made on
    the same read, which is what gets uploaded; `opened`: each file's state when its check opened it."""

    def __init__(self, pairs: list[tuple[Path, str]], listener: PushListener, private: Path):
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
        self.private, self.copies, self.opened = private, {}, {}
        self.listener = listener
        self.bucket_url: str | None = None  # the language's folder in the bucket, once it is opened

    @contextmanager
    def private_copy(self, key: str) -> Iterator[BinaryIO]:
        """A new file for `key`'s private copy; no room for it is an error that says where (exit 2)."""
        path = self.private / str(len(self.copies))
        self.copies[key] = path
        with path.open("wb") as fh:
            yield _SaysNoRoom(fh, path)

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


class _SaysNoRoom:
    """A private copy's file, whose write errors name the folder and the way out."""

    def __init__(self, fh: BinaryIO, path: Path):
        self.fh, self.path = fh, path

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            raise TrainstackError(
                f"could not keep a private copy of the file being pushed in {self.path.parent}: {exc.strerror}",
                hint="free space there, or point TMPDIR at a folder with room for the data",
            ) from exc


def size_text(n: float) -> str:
    """Bytes as a line says them: 812 B, 12.3 kB, 4.0 MB."""
    unit = "B"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            break
        n /= 1000
    return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
