"""Files copied one after another, shown as they go: on a terminal a bar of the bytes done, moving as each file's
bytes go (gone when the copy ends); without one a line every few seconds while one file takes long, with the
bytes it has sent. Each file's own line is the caller's to print, so a log keeps one line per file whatever
the speed."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

from rich.markup import escape

from stacks.cli.common import console
from stacks.datasets.report import size_text


@dataclass(eq=False)
class _Copy:
    name: str
    size: int
    started: float
    sent: int = 0


class FileProgress:
    def __init__(self, total_bytes: int, *, every_s: float = 5.0):
        self.total_bytes, self.every_s = total_bytes, every_s
        self._bar = self._task = None
        self._current: _Copy | None = None
        self._done = 0  # bytes of the files finished
        self._stop = threading.Event()
        self._beats: threading.Thread | None = None

    def __enter__(self) -> "FileProgress":
        if console.is_terminal:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("staging", total=max(self.total_bytes, 1))
        else:
            self._beats = threading.Thread(target=self._beat, name="file-progress", daemon=True)
            self._beats.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._bar:
            self._bar.stop()
        if self._beats:
            self._beats.join()

    @contextlib.contextmanager
    def file(self, name: str, size: int):
        """One file being copied (`name` as the lines say it; `size` in bytes) -> a callable that takes the bytes
        copied so far."""
        copy = self._current = _Copy(name, size, time.monotonic())
        if self._bar:
            self._bar.update(self._task, description=escape(name))

        def sent(n: int) -> None:
            copy.sent = min(n, size)
            if self._bar:
                self._bar.update(self._task, completed=self._done + copy.sent)

        try:
            yield sent
        finally:
            self._current = None
            self._done += size
            if self._bar:
                self._bar.update(self._task, completed=self._done)

    def _beat(self) -> None:
        said = None  # (copy, when its last line was said)
        while not self._stop.wait(self.every_s / 5):
            copy = self._current
            if copy is None:
                continue
            if said is None or said[0] is not copy:
                said = (copy, copy.started)
            if time.monotonic() - said[1] >= self.every_s:
                said = (copy, time.monotonic())
                console.print(
                    f"  still staging {copy.name}: {said[1] - copy.started:.0f}s, "
                    f"{size_text(copy.sent)} of {size_text(copy.size)}",
                    markup=False,
                    soft_wrap=True,
                )
