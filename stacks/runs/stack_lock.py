"""One trainctl at a time per stack, from its data check to its apply or destroy. The lock file says who holds it
(pid, what it does, the run), so a trainctl turned away names the run and what to do instead of racing it."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from stacks.errors import StackBusyError
from stacks.project import Project


class StackHold:
    """The lock a process holds on a stack; `doing` rewrites what the lock file tells the next trainctl."""

    def __init__(self, fh, lang: str | None):
        self._fh, self.lang, self.depth = fh, lang, 1

    def doing(self, what: str, run_id: str | None = None) -> None:
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(json.dumps({"pid": os.getpid(), "doing": what, "run": run_id, "lang": self.lang}))
        self._fh.flush()


# Locks this process holds, by file: a step that locks inside another (the apply inside the start) holds it already.
_held: dict[Path, StackHold] = {}
_held_guard = threading.Lock()


@contextmanager
def stack_lock(
    project: Project,
    env: str,
    stack: str,
    *,
    lang: str | None = None,
    doing: str = "working on it",
    run_id=None,
    wait_s: float = 0.0,
    on_wait=None,
):
    """Hold `stack`'s lock for the block, or raise StackBusyError (exit 2) naming the trainctl that holds it (after
    `wait_s` seconds of trying, `on_wait(why)` told once). Held already by this process: the block runs under it,
    and says what it does when it names a run."""
    path = project.env_dir(env) / "locks" / f"{stack}.lock"
    with _held_guard:
        hold = _held.get(path)
        if hold is not None:
            hold.depth += 1
    if hold is not None:
        if run_id:
            hold.doing(doing, run_id)
        try:
            yield hold
        finally:
            with _held_guard:
                hold.depth -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Opened without truncating: the holder's note is what the one turned away reads.
    with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+") as fh:
        deadline, told = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                fh.seek(0)
                refused = busy(env, stack, lang, fh.read())
                if time.monotonic() >= deadline:
                    raise refused from None
                if on_wait is not None and not told:
                    on_wait(refused.message)
                    told = True
                time.sleep(0.5)
        hold = StackHold(fh, lang)
        hold.doing(doing, run_id)
        with _held_guard:
            _held[path] = hold
        try:
            yield hold
        finally:
            with _held_guard:
                del _held[path]
            fh.seek(0)
            fh.truncate()


def busy(env: str, stack: str, lang: str | None, note: str) -> StackBusyError:
    try:
        holder = json.loads(note)
    except ValueError:
        holder = {}  # written by the holder a moment later
    run_id = holder.get("run")
    lang = lang or holder.get("lang")
    who = f"trainctl (pid {holder['pid']})" if holder.get("pid") else "another trainctl"
    doing = holder.get("doing") or "working on it"
    if run_id and lang:
        hint = (
            f"follow run {run_id}: trainctl logs {lang} --env {env} --follow · when that trainctl is done, "
            f"`trainctl train {lang} --env {env}` attaches to the run or starts the next"
        )
    else:
        hint = "rerun once that trainctl is done"
        if lang:
            hint += f" (trainctl status {lang} --env {env} shows its run)"
    return StackBusyError(f"{stack} in env {env} is busy: {who} is {doing}", hint=hint)
