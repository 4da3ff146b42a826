"""Slow transfers of a command (a run's model files from the bucket, a model logged to MLflow) shown as they go.

Without a terminal (CI, `> log`): a line when one starts, with its size where it is known, a line every few
seconds while it lasts, and a line when it ends, with its size, time and rate. On a terminal: a bar while it
lasts (gone when it ends), then the same last line. Neither the bucket's client nor MLflow's says how many
bytes have gone, so the bar shows that the transfer is alive and for how long, not a share of it.

The lines go where the command's own lines go (stdout; stderr under --json). Where a transfer runs inside
something that mutes the streams (MLflow's chatter, stacks.tracking.client.quiet), the stream is the one
taken when the transfer started.
"""

from __future__ import annotations

import contextlib
import threading
import time

from stacks.cli.common import OperatorConsole, console
from stacks.tracking.model import Transfer


def megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


class TransferReport:
    """`report(doing, size)`: a context manager around one transfer (`doing`: what it is, in words), yielding a
    Transfer whose `size` (bytes) the transfer may set once known. `every_s`: between two lines while one lasts."""

    def __init__(self, *, every_s: float = 10.0, clock=time.monotonic):
        self.every_s, self.clock = every_s, clock

    @contextlib.contextmanager
    def __call__(self, doing: str, size: int | None = None):
        step = Transfer(size)
        out = OperatorConsole(file=console.file, highlight=False)  # this stream, whatever mutes sys.* meanwhile
        started = self.clock()
        with self._bar(out, doing, size) if out.is_terminal else self._lines(out, doing, size, started):
            yield step
        seconds = self.clock() - started
        said = f"{doing}: done in {seconds:.1f} s"
        if step.size is not None:
            said = f"{doing}: {megabytes(step.size)} in {seconds:.1f} s ({megabytes(step.size / max(seconds, 1e-3))}/s)"
        out.print(said, markup=False, soft_wrap=True)

    @contextlib.contextmanager
    def _bar(self, out: OperatorConsole, doing: str, size: int | None):
        from rich.markup import escape
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        # total=None: a pulsing bar (how much has gone is not known), with the time so far
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=out,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as bar:
            bar.add_task(escape(doing + (f" ({megabytes(size)})" if size is not None else "")), total=None)
            yield

    @contextlib.contextmanager
    def _lines(self, out: OperatorConsole, doing: str, size: int | None, started: float):
        out.print(
            f"{doing}" + (f" ({megabytes(size)})" if size is not None else "") + "…", markup=False, soft_wrap=True
        )
        stop = threading.Event()

        def still() -> None:
            while not stop.wait(self.every_s):
                out.print(f"  still {doing}: {self.clock() - started:.0f} s", markup=False, soft_wrap=True)

        beats = threading.Thread(target=still, name="transfer-progress", daemon=True)
        beats.start()
        try:
            yield
        finally:
            stop.set()
            beats.join()
