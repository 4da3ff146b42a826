"""Run the trainer detached and make sure its run always ends with a final status.

The local target's launcher (what a VM's start-up script is on GCP):

    python -m trainer.launchers.local.supervisor start --state-dir D [--max-run-hours H] [--processes N]
        [--max-restarts R] [--max-restarts-on-errors E --restart-on-exit-codes 75,137]
        [--cores C --cores-dir L] -- <trainer args>
    python -m trainer.launchers.local.supervisor stop  --state-dir D [--timeout 25]

`start` returns at once, leaving a supervisor in its own process session that
runs `python -m trainer` (N gloo ranks under torchrun when N > 1), forwards
SIGTERM to it, enforces max_run_hours, and marks the run FAILED if the trainer
died without saying so. Like the instance group that recreates a preempted VM,
it starts the trainer again for the same run id when it was interrupted (exit
143, or death by a signal) without a final status, up to R times; a data or
code failure (exit 1 or 2, or a FAILED status) is never restarted (the rule:
trainer.launchers.interruptions). A trainer that ended without a final status with an exit status named in
--restart-on-exit-codes is restarted on its own budget instead, E times per run (trainer.launchers.restarts).
Nothing here depends on the process that called `start`.

With `--zone Z --market JSON` the machine is a Spot VM of a simulated market (trainer.launchers.market):
the trainer starts only while zone Z has capacity (each try without it is a creation error in the run's
folder, read by the local target as a group's error list), and a preemption due in Z sends it SIGTERM.
A stop while no trainer runs (waiting for capacity) leaves the run as it is, resumable: the lifecycle
moving it to another zone, or giving up on capacity, says how it ended.

With `--cores-dir`, the trainer is pinned to C cores (0: all) claimed in that ledger
(trainer.launchers.local.cores), shared by every run the project launched locally; while other runs hold
them the run waits, its status PENDING at stage `queued` and its log saying for whom.

Size: over 400 lines because queueing for cores, waiting for capacity, restarting after an interruption and
the run's final word are one loop around one child process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainer.launchers.interruptions import interruption, restarts_exhausted, resumable
from trainer.launchers.local.launch import MODULE, LocalLaunch
from trainer.launchers.restarts import RestartPolicy, exit_status, restart_records, take_restart
from trainer.launchers.trainer_process import GRACE_S, one_machine_command

PID_FILE, OUT_FILE, EXIT_FILE, CANCEL_FILE = "supervisor.pid", "trainer.out", "exit_code", "cancelled"
VM_FILE = "vm"  # "running" while a trainer runs, "waiting" while the zone has no capacity (the group's view)
TRAINER_PID_FILE = "trainer.pid"  # the current launch (python -m trainer, or torchrun and its ranks)


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


def read_pid(state_dir: Path, name: str = PID_FILE) -> int | None:
    try:
        return int((state_dir / name).read_text().strip())
    except (OSError, ValueError):
        return None


def is_running(state_dir: Path) -> bool:
    pid = read_pid(state_dir)
    return pid is not None and not (state_dir / EXIT_FILE).exists() and _alive(pid)


def start(launch: LocalLaunch) -> int:
    state_dir = launch.state
    state_dir.mkdir(parents=True, exist_ok=True)
    if is_running(state_dir):
        print(f"supervisor already running (pid {read_pid(state_dir)})")
        return 0
    for name in (EXIT_FILE, CANCEL_FILE, VM_FILE):
        (state_dir / name).unlink(missing_ok=True)
    with open(state_dir / OUT_FILE, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", MODULE, *launch.argv("run")],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    (state_dir / PID_FILE).write_text(str(proc.pid))
    print(f"trainer supervisor started (pid {proc.pid}); output: {state_dir / OUT_FILE}")
    return 0


def _write_atomic(path: Path, text: str) -> None:
    """A reader (the local target asking the group) sees the old text or the new one, never an empty file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _tail(path: Path, n: int = 8) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _run_args(trainer_args: list[str]):
    from trainer.cli import build_parser

    return build_parser().parse_known_args(trainer_args)[0]


def _finalize(trainer_args: list[str], error: str) -> None:
    """Mark the run FAILED unless the trainer already wrote a final state."""
    from trainer.runfiles.status_file import mark_failed
    from trainer.storage import open_bucket

    args = _run_args(trainer_args)
    mark_failed(open_bucket(args.bucket), args.lang, args.run_id, args.env, error)


def _launch(state_dir: Path, trainer_args: list[str], processes: int, cores: list[int] | None) -> subprocess.Popen:
    env = None
    if cores:  # torch, OpenMP and the tokenizer workers size their pools from the affinity mask
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, len(cores) // processes))}
    # Its own process group, so a kill after the grace period reaches torchrun's ranks too.
    child = subprocess.Popen(
        one_machine_command(processes, trainer_args),
        start_new_session=True,
        env=env,
        preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
    )
    (state_dir / TRAINER_PID_FILE).write_text(str(child.pid))
    return child


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_for_cores(ledger, want: int, args, stopping: dict, state_dir: Path, deadline: float) -> list[int] | None:
    """Claim `want` cores, queued (status PENDING, stage queued) while other local runs hold them.
    None: stopped, cancelled or out of time while waiting."""
    from trainer.launchers.local.cores import describe
    from trainer.runfiles.keys import run_key
    from trainer.runfiles.status_file import QUEUED, RunStatus, read_status, write_status
    from trainer.storage import open_bucket

    label = f"{args.lang} run {args.run_id}"
    said = None
    while not (stopping["signal"] or (state_dir / CANCEL_FILE).exists() or time.monotonic() > deadline):
        cores = ledger.claim(args.run_id, want, pid=os.getpid(), label=label)
        if cores is not None:
            if said is not None:
                print(f"trainstack supervisor: cores {describe(cores)} free: starting {label}", flush=True)
            return cores
        holders = ", ".join(f"{c.label} (cores {describe(list(c.cores))})" for c in ledger.holders())
        if holders != said:
            said = holders
            message = (
                f"queued: waiting for {ledger.want(want)} of this machine's {len(ledger.cores)} cores, "
                f"held by {holders or 'a run that just ended'}; local runs never share cores"
            )
            print(f"trainstack supervisor: {message}", flush=True)
            bucket = open_bucket(args.bucket)
            if read_status(bucket, args.lang, args.run_id) is None:
                write_status(
                    bucket, RunStatus(run_id=args.run_id, lang=args.lang, env=args.env, job=args.job, stage=QUEUED)
                )
            bucket.append(run_key(args.lang, args.run_id, "log.txt"), f"{message}\n".encode())
        time.sleep(1.0)
    return None


def run(launch: LocalLaunch) -> int:
    from trainer.launchers.local.cores import CoreLedger
    from trainer.launchers.local.spot_vm import SpotVm
    from trainer.launchers.market import Market
    from trainer.runfiles.run_ids import run_started_at

    state_dir, trainer_args, max_run_hours = launch.state, list(launch.trainer_args), launch.max_run_hours
    processes, max_restarts, cores, zone, market = (
        launch.processes,
        launch.max_restarts,
        launch.cores,
        launch.zone,
        launch.market,
    )
    cores_dir = Path(launch.cores_dir) if launch.cores_dir else None
    args = _run_args(trainer_args)
    spot = (
        SpotVm(Market.from_json(market, run_started_at(args.run_id) or time.time()), zone, state_dir, args)
        if market
        else None
    )
    deadline = time.monotonic() + max_run_hours * 3600
    stopping = {"signal": False, "child": None}

    def forward(signum, _frame):
        stopping["signal"] = True
        child = stopping["child"]
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    ledger = CoreLedger(cores_dir) if cores_dir else None
    try:
        try:
            pinned = _wait_for_cores(ledger, cores, args, stopping, state_dir, deadline) if ledger else None
        except Exception as exc:  # the ledger or the bucket: the run still gets its final word
            print(f"trainstack supervisor: could not claim cores: {exc!r}", flush=True)
            _finalize(trainer_args, f"the local launcher could not claim cores: {exc!r}")
            (state_dir / EXIT_FILE).write_text("1")
            return 0
        if ledger and (pinned is None or stopping["signal"]):
            timed_out = time.monotonic() > deadline
            _end(state_dir, trainer_args, 1, timed_out=timed_out, max_run_hours=max_run_hours, queued=True)
            return 0
        return _supervise(
            state_dir,
            max_run_hours,
            trainer_args,
            processes,
            max_restarts,
            pinned,
            args,
            deadline,
            stopping,
            spot,
            launch.restart_policy,
        )
    finally:
        if ledger:
            ledger.release(args.run_id)


def _supervise(
    state_dir: Path,
    max_run_hours: float,
    trainer_args: list[str],
    processes: int,
    max_restarts: int,
    pinned: list[int] | None,
    args,
    deadline: float,
    stopping: dict,
    spot=None,
    policy: RestartPolicy | None = None,
) -> int:
    from trainer.runfiles.status_file import read_status
    from trainer.storage import open_bucket

    timed_out, restarts, policy = False, 0, policy or RestartPolicy()
    while True:
        if spot is not None and not spot.wait_for_capacity(
            lambda: stopping["signal"] or (state_dir / CANCEL_FILE).exists() or time.monotonic() > deadline
        ):
            if time.monotonic() > deadline:
                _end(state_dir, trainer_args, 1, timed_out=True, max_run_hours=max_run_hours)
            else:  # no VM, no trainer: the run stays as it is (resumable) for whoever stopped it to say
                print(
                    "trainstack supervisor: stopped while waiting for Spot capacity; the run is left resumable",
                    flush=True,
                )
                (state_dir / EXIT_FILE).write_text("0")
            return 0
        seen = spot.log_seen() if spot is not None else None  # where the run log stands as this VM boots
        child = stopping["child"] = _launch(state_dir, trainer_args, processes, pinned)
        _write_atomic(state_dir / VM_FILE, "running")
        if spot is not None:
            spot.preempted = False
        watcher = spot.watch(child, seen) if spot is not None else None
        try:
            code = child.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            timed_out = True
            child.send_signal(signal.SIGTERM)
            try:
                code = child.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                _kill_group(child.pid)
                code = child.wait()
        if watcher is not None:
            watcher.join()
        _write_atomic(state_dir / VM_FILE, "waiting")
        if timed_out or stopping["signal"] or (state_dir / CANCEL_FILE).exists():
            break
        bucket = open_bucket(args.bucket)
        status = read_status(bucket, args.lang, args.run_id)
        restart = _restart_on_error(bucket, args, policy, code, status, spot=spot)
        if restart is True:
            continue
        if restart is not None:
            code = f"{code}; {restart}"
            break
        if not resumable(code, status, processes=processes):
            break
        taken = len(restart_records(bucket, args.lang, args.run_id, policy))
        exhausted = restarts_exhausted(interruption(status, seen=restarts, restarted_on_errors=taken), max_restarts)
        if exhausted:
            code = f"{code}; {exhausted}"
            break
        restarts += 1
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        print(
            f"trainstack supervisor: trainer interrupted ({how}); restarting it for run {args.run_id} "
            f"(restart {restarts} of at most {max_restarts}), as the instance group recreates a preempted VM",
            flush=True,
        )
    _end(state_dir, trainer_args, code, timed_out=timed_out, max_run_hours=max_run_hours)
    return 0


def _restart_on_error(bucket, args, policy: RestartPolicy, code: int, status, *, spot) -> bool | str | None:
    """True: restarted after a failure not the code's (trainer.launchers.restarts); a text: such a failure
    past max_restarts_on_errors, why the run ends; None: not such a failure (the interruption rule decides; a VM
    the market preempted, however its trainer ended)."""
    if spot is not None and spot.preempted:
        return None
    zone = spot.zone if spot is not None else None
    cause = policy.cause(exit_status(code), status)
    if cause is None:
        return None
    where = {"launcher": "local", **({"zone": zone} if zone else {})}
    restarted, line = take_restart(bucket, args.lang, args.run_id, policy, cause, code=exit_status(code), where=where)
    print(f"trainstack supervisor: {line}" + (f" (run {args.run_id})" if restarted else ""), flush=True)
    return True if restarted else line


def _end(
    state_dir: Path, trainer_args: list[str], code, *, timed_out: bool, max_run_hours: float, queued: bool = False
) -> None:
    """The run's final word: FAILED with why, unless the trainer already wrote how it ended."""
    if timed_out:
        error = f"stopped after max_run_hours={max_run_hours:g}" + (" (queued for cores all along)" if queued else "")
    elif queued:
        error = "cancelled while queued for cores: the training stack was destroyed before the run started"
    elif (state_dir / CANCEL_FILE).exists():
        error = "cancelled: the training stack was destroyed while the run was active"
    elif code != 0:
        error = f"trainer exited with code {code}" + (" (signal)" if isinstance(code, int) and code < 0 else "")
        tail = _tail(state_dir / OUT_FILE)
        if tail:
            error += f"; last output:\n{tail}"
    else:
        error = "trainer exited without writing a final status"
    try:
        _finalize(trainer_args, error)
    finally:
        (state_dir / EXIT_FILE).write_text(str(code).split(";")[0])


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
        trainer = read_pid(state_dir, TRAINER_PID_FILE)
        if trainer is not None:
            _kill_group(trainer)
        _kill_group(pid)
        print(f"trainer did not stop within {timeout:g}s: killed")
    else:
        print("trainer stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    action, launch, timeout = LocalLaunch.parse(list(sys.argv[1:] if argv is None else argv), __doc__)
    if action == "start":
        return start(launch)
    if action == "run":
        return run(launch)
    return stop(launch.state, timeout)


if __name__ == "__main__":
    sys.exit(main())
