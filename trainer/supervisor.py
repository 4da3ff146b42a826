"""Run the trainer detached and make sure its run always ends with a final status.

The local target's launcher (what a VM's start-up script is on GCP):

    python -m trainer.supervisor start --state-dir D [--max-run-hours H] -- <trainer args>
    python -m trainer.supervisor stop  --state-dir D [--timeout 25]

`start` returns at once, leaving a supervisor in its own process session that
runs `python -m trainer`, forwards SIGTERM to it, enforces max_run_hours, and
marks the run FAILED if the trainer died without saying so (crash, kill,
`stop`). Nothing here depends on the process that called `start`.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PID_FILE, OUT_FILE, EXIT_FILE, CANCEL_FILE = "supervisor.pid", "trainer.out", "exit_code", "cancelled"
GRACE_S = 25  # Spot VMs get ~30 s notice; the local target keeps the same budget.


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def read_pid(state_dir: Path) -> int | None:
    try:
        return int((state_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def is_running(state_dir: Path) -> bool:
    pid = read_pid(state_dir)
    return pid is not None and not (state_dir / EXIT_FILE).exists() and _alive(pid)


def start(state_dir: Path, max_run_hours: float, trainer_args: list[str]) -> int:
    state_dir.mkdir(parents=True, exist_ok=True)
    if is_running(state_dir):
        print(f"supervisor already running (pid {read_pid(state_dir)})")
        return 0
    for name in (EXIT_FILE, CANCEL_FILE):
        (state_dir / name).unlink(missing_ok=True)
    with open(state_dir / OUT_FILE, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainer.supervisor", "run", "--state-dir", str(state_dir),
             "--max-run-hours", str(max_run_hours), "--", *trainer_args],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    (state_dir / PID_FILE).write_text(str(proc.pid))
    print(f"trainer supervisor started (pid {proc.pid}); output: {state_dir / OUT_FILE}")
    return 0


def _tail(path: Path, n: int = 8) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _finalize(trainer_args: list[str], error: str) -> None:
    """Mark the run FAILED unless the trainer already wrote a final state."""
    from trainer.cli import build_parser
    from trainer.runs import mark_failed
    from trainer.storage import open_bucket

    args, _ = build_parser().parse_known_args(trainer_args)
    mark_failed(open_bucket(args.bucket), args.lang, args.run_id, args.env, error)


def run(state_dir: Path, max_run_hours: float, trainer_args: list[str]) -> int:
    child = subprocess.Popen([sys.executable, "-m", "trainer", *trainer_args])
    stopping = {"signal": False}

    def forward(signum, _frame):
        stopping["signal"] = True
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    timed_out = False
    try:
        code = child.wait(timeout=max_run_hours * 3600)
    except subprocess.TimeoutExpired:
        timed_out = True
        child.send_signal(signal.SIGTERM)
        try:
            code = child.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
    if timed_out:
        error = f"stopped after max_run_hours={max_run_hours:g}"
    elif (state_dir / CANCEL_FILE).exists():
        error = "cancelled: the training stack was destroyed while the run was active"
    elif code != 0:
        error = f"trainer exited with code {code}" + (f" (signal)" if code < 0 else "")
        tail = _tail(state_dir / OUT_FILE)
        if tail:
            error += f"; last output:\n{tail}"
    else:
        error = "trainer exited without writing a final status"
    try:
        _finalize(trainer_args, error)
    finally:
        (state_dir / EXIT_FILE).write_text(str(code))
    return 0


def stop(state_dir: Path, timeout: float) -> int:
    pid = read_pid(state_dir)
    if pid is None or not is_running(state_dir):
        print("trainer is not running")
        return 0
    (state_dir / CANCEL_FILE).touch()
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout + 5
    while time.monotonic() < deadline and _alive(pid) and not (state_dir / EXIT_FILE).exists():
        time.sleep(0.2)
    if _alive(pid) and not (state_dir / EXIT_FILE).exists():
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        print(f"trainer did not stop within {timeout:g}s: killed")
    else:
        print("trainer stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.supervisor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "run", "stop"])
    parser.add_argument("--state-dir", type=Path, required=True, help="pid, output and exit files")
    parser.add_argument("--max-run-hours", type=float, default=6.0)
    parser.add_argument("--timeout", type=float, default=GRACE_S, help="stop: seconds before SIGKILL")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, rest = parser.parse_args(argv[:cut]), argv[cut + 1:]
    if args.action == "start":
        return start(args.state_dir, args.max_run_hours, rest)
    if args.action == "run":
        return run(args.state_dir, args.max_run_hours, rest)
    return stop(args.state_dir, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
