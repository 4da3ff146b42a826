"""trainctl as a user runs it (a subprocess in a project folder) and what a local run leaves behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from trainer.launchers.local import supervisor

TRAINCTL = str(Path(sys.prefix) / "bin" / "trainctl")


def trainctl(project: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TRAINCTL, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


# Puts SIGINT back to its default, then becomes trainctl (same pid). A background job of a non-interactive
# shell (`bash -c 'bash .ci/run &'`, nohup) starts every child with SIGINT ignored, and Python raises no
# KeyboardInterrupt for an ignored SIGINT. An exec wrapper rather than preexec_fn: the test has threads.
_SIGINT_AT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
)


def start_trainctl(project: Path, *args: str, program: str = TRAINCTL) -> subprocess.Popen:
    """trainctl as a terminal starts it, for the tests that press Ctrl-C: SIGINT at its default whatever this
    process inherited (trainctl itself keeps an ignored SIGINT ignored, as nohup intends: README), in a
    session of its own so the test's signal reaches it alone; stdout and stderr together, as text."""
    return subprocess.Popen(
        [sys.executable, "-c", _SIGINT_AT_DEFAULT, program, *args],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def run_dir(project: Path, lang: str, run_id: str) -> Path:
    return project / ".trainstack/local/bucket" / lang / "runs" / run_id


def only_run(project: Path, lang: str) -> str:
    runs = sorted(p.name for p in (project / ".trainstack/local/bucket" / lang / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def assert_nothing_left(project: Path, lang: str = "fr") -> None:
    state = project / ".trainstack/local/state" / f"train-{lang}.tfstate"
    assert json.loads(state.read_text())["resources"] == [], "terraform state still holds resources"
    for procs in (project / ".trainstack/local/procs").glob("*"):
        pid = supervisor.read_pid(procs)
        assert pid is None or not supervisor._alive(pid), f"trainer supervisor {pid} still running"


def sim_vm_processes(project: Path, env: str) -> list[int]:
    """Processes (ours) whose environment names the env's simulated VMs' folder: agents, trainers."""
    mark = str(project / ".trainstack" / env / "simulated-vms").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone, or not ours
            continue
    return found


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def ctrl_c_once_printed(
    project: Path, text: str, *args: str, timeout: float = 400, before_ctrl_c=lambda: None
) -> tuple[int, str]:
    """`trainctl ARGS` until it prints `text` (then `before_ctrl_c()` and SIGINT, as Ctrl-C) or exits by itself
    -> (exit status, output)."""
    proc = start_trainctl(project, *args)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: proc.poll() is not None or any(text in line for line in seen), timeout, repr(text))
        if proc.poll() is None:
            before_ctrl_c()
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    return proc.returncode, "".join(seen)
