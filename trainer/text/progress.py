"""Tokenizing shown as it goes: a line in the run's log every LINE_EVERY_S seconds (texts or bytes done of
the total, tokens, tokens/s, time left), and on a terminal a bar redrawn in place.

It is told once per chunk of texts (thousands of them), never per text, so it costs a clock read per
chunk. The bar goes to the stream the run's log prints on (stdout): it is wiped before each log line and
when the work ends, so the lines stay whole and the bar never reaches log.txt.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

LINE_EVERY_S = 10.0  # between two progress lines in log.txt
BAR_EVERY_S = 0.2  # between two redraws of the terminal bar
BAR_CELLS = 24
WIPE = "\r\x1b[K"  # back to the line's start, erase it


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


class TokenizingProgress:
    """One tokenization's progress; `what` starts its lines ("tokenizing", "tokenizing <corpus file>:").
    `total` is in the unit the caller counts as done: texts (`unit="texts"`), or the bytes of a file read so
    far (`unit="bytes"`, when the number of texts is not known before the end)."""

    def __init__(
        self,
        log,
        what: str,
        *,
        total: int,
        unit: str = "texts",
        every_s: float | None = None,
        clock=time.monotonic,
        stream: TextIO | None = None,
    ):
        self.log, self.what, self.total, self.unit = log, what, max(int(total), 0), unit
        self.every_s = LINE_EVERY_S if every_s is None else every_s
        self.clock = clock
        self.stream = sys.stdout if stream is None else stream
        self.on_terminal = _is_terminal(self.stream)
        self.done = self.texts = self.tokens = 0
        now = clock()
        self.last_line = self.last_bar = now
        # where the rates count from: texts already tokenized (a resumed corpus's cached parts) are skipped fast
        self.base_time, self.base_done, self.base_tokens = now, 0, 0
        self.bar_shown = False

    def advance(self, texts: int, tokens: int, *, done: int | None = None) -> None:
        """`texts` more tokenized into `tokens` more tokens; `done`: the units of `total` done now (default:
        the texts so far)."""
        self.texts += texts
        self.tokens += tokens
        self.done = self.texts if done is None else done
        self._show(self.clock())

    def skip(self, texts: int, tokens: int, *, done: int | None = None) -> None:
        """Texts done before (a cached part): counted, but left out of the rates and the time left."""
        self.texts += texts
        self.tokens += tokens
        self.done = self.texts if done is None else done
        self.base_time, self.base_done, self.base_tokens = self.clock(), self.done, self.tokens

    def close(self) -> None:
        """The work ended (or failed): the bar is wiped; the caller's own line says how it went."""
        self._wipe()

    def __enter__(self) -> "TokenizingProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _show(self, now: float) -> None:
        if now - self.last_line >= self.every_s and self.done < self.total:
            self.last_line = now
            self._wipe()  # the bar shares the stream the log prints on
            self.log.line(f"tokens: {self.what} {self.describe(now)}")
        if self.on_terminal and now - self.last_bar >= BAR_EVERY_S:
            self.last_bar = now
            self._bar(now)

    def fraction(self) -> float:
        return min(self.done / self.total, 1.0) if self.total else 0.0

    def describe(self, now: float) -> str:
        """Where it is: done of the total, tokens, the rate, the time left."""
        share = f"{100 * self.fraction():.0f}%"
        if self.unit == "bytes":
            where = f"{share} ({_megabytes(self.done)} of {_megabytes(self.total)} read), {self.texts:,} texts"
        else:
            where = f"{self.done:,} of {self.total:,} {self.unit} ({share})"
        elapsed = now - self.base_time
        text = f"{where}, {self.tokens:,} tokens"
        if elapsed > 0 and self.tokens > self.base_tokens:
            text += f", {(self.tokens - self.base_tokens) / elapsed:,.0f} tokens/s"
        if elapsed > 0 and self.done > self.base_done:
            left = (self.total - self.done) * elapsed / (self.done - self.base_done)
            text += f", about {_duration(left)} left"
        return text

    def _bar(self, now: float) -> None:
        filled = int(BAR_CELLS * self.fraction())
        text = f"tokens [{'#' * filled}{'.' * (BAR_CELLS - filled)}] {self.describe(now)}"
        width = shutil.get_terminal_size().columns - 1  # never wraps: a wrapped line cannot be redrawn in place
        self.stream.write(WIPE + text[: max(width, 10)])
        self.stream.flush()
        self.bar_shown = True

    def _wipe(self) -> None:
        if self.bar_shown:
            self.stream.write(WIPE)
            self.stream.flush()
            self.bar_shown = False


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
