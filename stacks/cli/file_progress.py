"""Files copied one after another, shown as they go: on a terminal a bar of the bytes done (gone when the
copy ends); without one a line every few seconds while one file takes long. Each file's own line is the
caller's to print, so a log keeps one line per file whatever the speed."""
from __future__ import annotations

import contextlib
import threading
import time

from rich.markup import escape

from stacks.cli.common import console


class FileProgress:
    def __init__(self, total_bytes: int, *, every_s: float = 5.0):
        self.total_bytes, self.every_s = total_bytes, every_s
        self._bar = self._task = None
        self._current: tuple[str, float] | None = None  # (file, when it started)
        self._stop = threading.Event()
        self._beats: threading.Thread | None = None

    def __enter__(self) -> "FileProgress":
        if console.is_terminal:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
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
        """One file being copied (`name` as the lines say it; `size` in bytes)."""
        self._current = (name, time.monotonic())
        if self._bar:
            self._bar.update(self._task, description=escape(name))
        try:
            yield
        finally:
            self._current = None
            if self._bar:
                self._bar.advance(self._task, size)

    def _beat(self) -> None:
        said = None  # (file, when its last line was said)
        while not self._stop.wait(self.every_s / 5):
            current = self._current
            if current is None:
                continue
            name, started = current
            if said is None or said[0] != current:
                said = (current, started)
            if time.monotonic() - said[1] >= self.every_s:
                said = (current, time.monotonic())
                console.print(f"  still staging {name}: {said[1] - started:.0f}s", markup=False,
                              soft_wrap=True)
