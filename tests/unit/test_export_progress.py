"""A model on its way out says so: the trainer's upload of model.pth (size first, time after), and trainctl's
slow transfers while it logs a model to MLflow (lines without a terminal, a bar on one)."""

from __future__ import annotations

import io
import re
import threading
from types import SimpleNamespace

import pytest


class FlushedLog:
    """Stands in for RunLog: the lines, and which of them a flush has written."""

    def __init__(self):
        self.lines: list[str] = []
        self.written = 0

    def line(self, message: str) -> None:
        self.lines.append(message)

    def flush(self) -> None:
        self.written = len(self.lines)


def test_the_trainer_says_a_model_size_before_its_upload_and_its_time_after(tmp_path):
    from trainer.stages.upload import put_model

    model = tmp_path / "model.pth"
    model.write_bytes(b"\0" * 2_500_000)
    log, now = FlushedLog(), [50.0]
    seen_before_upload = []

    def put(path, name):
        seen_before_upload.append(log.lines[: log.written])  # what a follower of log.txt reads meanwhile
        now[0] += 2.0

    put_model(SimpleNamespace(log=log, put=put), model, "model.pth", export_s=1.25, clock=lambda: now[0])
    assert seen_before_upload == [["model.pth: exported (2.5 MB) in 1.2 s; uploading it"]]
    assert log.lines[-1] == "model.pth: uploaded (2.5 MB) in 2.0 s (1.2 MB/s)"


class Screen(io.StringIO):
    """A stream that says when a line arrives (a transfer that lasts until the report has spoken)."""

    def __init__(self, *, terminal: bool = False):
        super().__init__()
        self.terminal, self.arrived = terminal, threading.Event()

    def isatty(self) -> bool:
        return self.terminal

    def write(self, text: str) -> int:
        written = super().write(text)
        if "still" in text:
            self.arrived.set()
        return written


@pytest.fixture
def screen(monkeypatch):
    """trainctl's console writing to a Screen (as json_on_stdout swaps its stream)."""
    from stacks.cli.common import console

    out = Screen()
    monkeypatch.setattr(console, "_file", out)
    return out


def test_without_a_terminal_a_transfer_says_its_size_that_it_goes_on_and_its_time(screen):
    from stacks.cli.transfer_progress import TransferReport

    now = [0.0]
    report = TransferReport(every_s=0.01, clock=lambda: now[0])
    with report("logging the model of fr R to MLflow", 87_300_000):
        now[0] = 12.0
        assert screen.arrived.wait(10), screen.getvalue()  # the report speaks while the transfer lasts
        now[0] = 20.0
    lines = screen.getvalue().splitlines()
    assert lines[0] == "logging the model of fr R to MLflow (87.3 MB)…"
    assert lines[1].startswith("  still logging the model of fr R to MLflow: ") and lines[1].endswith(" s")
    assert lines[-1] == "logging the model of fr R to MLflow: 87.3 MB in 20.0 s (4.4 MB/s)"

    screen.seek(0)
    screen.truncate()
    with report("downloading the model files of fr R from the bucket") as step:
        now[0] = 21.5
        step.size = 3_000_000  # known once it is here
    assert screen.getvalue().splitlines() == [
        "downloading the model files of fr R from the bucket…",
        "downloading the model files of fr R from the bucket: 3.0 MB in 1.5 s (2.0 MB/s)",
    ]
    screen.seek(0)
    screen.truncate()
    with pytest.raises(OSError), report("downloading the model files of fr R from the bucket"):
        raise OSError("disk full")
    assert len(screen.getvalue().splitlines()) == 1  # what failed says so itself: no line claims it done


def test_on_a_terminal_a_transfer_shows_a_bar_then_one_line(screen):
    from stacks.cli.transfer_progress import TransferReport

    screen.terminal = True
    with TransferReport()("logging the model of fr R to MLflow", 87_300_000):
        pass
    said = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())  # the bar's cursor moves
    assert "logging the model of fr R to MLflow (87.3 MB)" in said  # the bar's description
    assert said.rstrip().splitlines()[-1].startswith("logging the model of fr R to MLflow: 87.3 MB in ")
    assert "…" not in said and "still" not in said


def test_logging_a_model_shows_its_transfers_only_where_a_command_asked(tmp_path):
    """The bucket's part of logging a model (the MLflow part needs a server: tests/e2e/test_tracking.py)."""
    from contextlib import contextmanager

    from stacks.tracking.model import Transfer, pyfunc_model, reporting_transfers
    from tests.support.runs import tracked_run
    from trainer.storage import open_bucket

    tracked_run(tmp_path, "fr", "20261127-100000-abcd")
    bucket = open_bucket(f"file://{tmp_path}")
    said = []

    @contextmanager
    def report(doing, size=None):
        step = Transfer(size)
        yield step
        said.append((doing, step.size))

    with pyfunc_model(bucket, "fr", "20261127-100000-abcd"):
        pass
    assert said == []
    with reporting_transfers(report), pyfunc_model(bucket, "fr", "20261127-100000-abcd") as model:
        pass
    size = sum(len((tmp_path / "fr/runs/20261127-100000-abcd" / name).read_bytes()) for name in model["artifacts"])
    assert said == [("downloading the model files of fr 20261127-100000-abcd from the bucket", size)]
    with pyfunc_model(bucket, "fr", "20261127-100000-abcd"):
        pass
    assert len(said) == 1  # the report was the command's for its `with` only
