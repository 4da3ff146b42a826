"""Watching a run from the operator side: its live state, its log as it grows, following it to the end."""

from __future__ import annotations

import itertools
import time
from typing import Callable, Protocol

from stacks.errors import InfraError, VmCreationError
from trainer.runfiles.keys import run_key
from trainer.runfiles.run_ids import run_started_at
from trainer.runfiles.status_file import INTERRUPTED_STAGE, RunStatus, read_status
from trainer.storage import Bucket


class CreationProblem(Protocol):
    """One error the target met creating the run's machines (gcp: an entry of the group's error list)."""

    hint: str
    kind: str  # capacity, quota (the run may move to another zone), every-region (a quota no zone escapes) or other

    # Optional: queued -> bool, a request waiting in a queue (flex-start), not an error: it has the queue's limit.

    def line(self) -> str: ...

    # Optional: rules_out(placement) -> bool, whether the same error would come there too (a regional quota).


class Reporter(Protocol):
    def info(self, message: str) -> None: ...
    def warn(self, message: str) -> None: ...
    def log_line(self, line: str) -> None: ...
    def progress(self, status: RunStatus) -> None: ...


def live_state(bucket: Bucket, lang: str, run_id: str, appear_timeout_s: float) -> str | None:
    """The state of a run that may still be going (RUNNING, …, or STARTING before its first
    status.json: a Spot VM can take many minutes), None when it has ended or never will."""
    status = read_status(bucket, lang, run_id)
    if status is not None:
        return None if status.terminal else status.state
    # Its latest placement counts as a start: a run moving from dry zone to dry zone (a pass over them takes
    # longer than the appear timeout) has no status yet and is still going.
    started = max(filter(None, (run_started_at(run_id), last_placed_at(bucket, lang, run_id))), default=None)
    young = started is not None and time.time() - started < appear_timeout_s + last_queue_s(bucket, lang, run_id)
    return "STARTING" if young and vm_startup_error(bucket, lang, run_id) is None else None


def last_placed_at(bucket: Bucket, lang: str, run_id: str) -> float | None:
    """When the run's latest placement was applied or ended (metadata/placements.json), epoch s; None: none."""
    from trainer.runfiles.keys import PLACEMENTS_META
    from trainer.runfiles.readers import read_json
    from trainer.runfiles.timestamps import parse_time

    placements = (read_json(bucket, run_key(lang, run_id, PLACEMENTS_META)) or {}).get("placements") or []
    times = [parse_time(placements[-1].get(k)) for k in ("applied_at", "ended_at")] if placements else []
    return max((t.timestamp() for t in times if t is not None), default=None)


def last_queue_s(bucket: Bucket, lang: str, run_id: str) -> float:
    """How long the run's latest placement may wait in a queue before any VM exists (a flex-start request)."""
    from trainer.runfiles.keys import PLACEMENTS_META
    from trainer.runfiles.readers import read_json

    placements = (read_json(bucket, run_key(lang, run_id, PLACEMENTS_META)) or {}).get("placements") or []
    queue = placements[-1].get("queue_s") if placements else None
    return float(queue) if isinstance(queue, (int, float)) else 0.0


class LogTail:
    """New lines of a run's log.txt since the last call."""

    def __init__(self, bucket: Bucket, lang: str, run_id: str):
        self.bucket, self.key, self.cursor = bucket, run_key(lang, run_id, "log.txt"), None

    def new_lines(self) -> list[str]:
        chunk, self.cursor = self.bucket.read_appended(self.key, self.cursor)
        return chunk.decode("utf-8", "replace").splitlines()


def follow(
    bucket: Bucket,
    lang: str,
    run_id: str,
    reporter: Reporter,
    *,
    poll_s: float = 1.0,
    launcher_alive: Callable[[], bool] | None = None,
    print_log: bool = True,
    appear_timeout_s: float = 180,
    give_up_at: float | None = None,
    notes_every: int = 12,
    creation_errors: Callable[[], list[CreationProblem]] | None = None,
    creation_error_limit_s: float = 600,
    queued_limit_s: float | None = None,
    vm_running: Callable[[], bool | None] | None = None,
    on_status: Callable[[RunStatus | None], None] | None = None,
    tail: LogTail | None = None,
) -> RunStatus:
    """Print log lines and progress until the run ends; return its final status.

    `give_up_at` (epoch s): past it a run without a final status is reported instead of
    followed forever (the VM side stops at max_run_hours and marks the run FAILED).
    `creation_errors`: new errors creating the run's machines, each warned once. While the run has no
    VM (no status.json yet, or interrupted by a preemption) and for `creation_error_limit_s` only errors
    came, VmCreationError (its `movable`: only capacity or quota errors) -- unless `vm_running()` (the
    group's own view) says a VM runs: a status that is late is not a lost VM. `queued_limit_s`: the limit while
    every problem of the window is a queued request (a flex-start request waiting its turn), not an error.
    `on_status(status)`: told every status read (the lifecycle's record of preemptions).
    `tail`: the log's reader, when following goes on from an earlier call (no line printed twice).
    """
    tail = tail or LogTail(bucket, lang, run_id)
    started = time.monotonic()
    dead_since = None
    creation = (
        None
        if creation_errors is None
        else CreationWatch(run_id, creation_errors, creation_error_limit_s, vm_running, reporter, queued_limit_s)
    )
    for poll in itertools.count():
        for line in tail.new_lines() if print_log else []:
            reporter.log_line(line)
        status = read_status(bucket, lang, run_id)
        if on_status is not None:
            on_status(status)
        if status is not None:
            reporter.progress(status)
            if status.terminal:
                for line in tail.new_lines() if print_log else []:
                    reporter.log_line(line)
                return status
        if creation is not None and (creation.no_vm(status) or poll % notes_every == 0):
            creation.check(status)
        # A VM that cannot (re)start the trainer leaves a note and stops its group.
        if (status is None or poll % notes_every == 0) and (note := vm_startup_error(bucket, lang, run_id)):
            raise InfraError(
                f"run {run_id} stopped on its VM: {note}",
                hint=f"fix the cause, then `trainctl destroy {lang}` and train again",
            )
        if status is None and time.monotonic() - started > appear_timeout_s:
            raise StatusMissing(
                f"run {run_id} wrote no status.json within {appear_timeout_s:.0f}s",
                hint=f"look at the launcher's output; `trainctl logs {lang} --run {run_id}`",
            )
        if give_up_at is not None and time.time() > give_up_at:
            raise InfraError(
                f"run {run_id} is past max_run_hours without a final status",
                hint=f"`trainctl logs {lang} --run {run_id}`; `trainctl destroy {lang}` tears it down",
            )
        if launcher_alive is not None and not launcher_alive():
            # The supervisor writes the final status before it exits; give storage a moment.
            dead_since = dead_since or time.monotonic()
            if time.monotonic() - dead_since > 10:
                raise InfraError(
                    f"the trainer of run {run_id} is gone without a final status",
                    hint=f"`trainctl logs {lang} --run {run_id}`; `trainctl destroy {lang}`",
                )
        time.sleep(poll_s)
    raise AssertionError("unreachable")


REPEATS_TOLD_EVERY = 10  # an error seen again: its count is told every this many times


class CreationWatch:
    """The errors creating a run's machines, as `follow` checks them: each warned once; no VM for `limit_s` and
    only errors meanwhile: VmCreationError, unless `vm_running()` (the group's own view) says a VM runs. While
    every problem of the window is a queued request (`queued`), `queued_limit_s` holds instead."""

    def __init__(
        self,
        run_id: str,
        errors: Callable[[], list[CreationProblem]],
        limit_s: float,
        vm_running: Callable[[], bool | None] | None,
        reporter: Reporter,
        queued_limit_s: float | None = None,
    ):
        self.run_id, self.errors, self.vm_running, self.reporter = run_id, errors, vm_running, reporter
        self.error_limit_s, self.queued_limit_s = limit_s, limit_s if queued_limit_s is None else queued_limit_s
        self.only_queued = True  # every problem of the window so far is a queued request
        self.error_since: float | None = None  # when the window's first problem that is not a queued request came
        self.since: float | None = None  # when only errors began to come while no VM ran
        self.lost_at: str | None = None  # the updated_at of a RUNNING status whose VM the group says is gone
        self.kinds: set[str] = set()
        self.last: CreationProblem | None = None
        self.rules_out: list = []  # rules_out of the window's problems that have one
        self.told: dict[str, int] = {}  # each error's line -> times seen while no VM ran

    def _new_window(self) -> None:
        """A VM ran (or runs): the next stretch without one starts its own window."""
        self.since, self.error_since, self.only_queued = None, None, True
        self.kinds, self.rules_out, self.last = set(), [], None

    def _over(self, now: float) -> bool:
        """The window is past its limit: the queue's from its start while only queued requests came; else the
        errors', from the first error (a request queued for most of its wait, then refused, still has its time)."""
        if self.since is None:
            return False
        if self.only_queued:
            return now - self.since >= self.queued_limit_s
        return now - (self.error_since or self.since) >= self.error_limit_s

    def no_vm(self, status: RunStatus | None) -> bool:
        """No VM runs the run: no status.json yet, interrupted by a preemption, or lost without a word (a RUNNING
        status that stopped changing once the group said it had no VM: no VM while it stays so)."""
        return (
            status is None
            or status.stage == INTERRUPTED_STAGE
            or (self.lost_at is not None and status.updated_at == self.lost_at)
        )

    def check(self, status: RunStatus | None) -> None:
        no_vm, problems = self.no_vm(status), self.errors()
        for problem in problems:
            # a group retries a VM that fails for the same reason every minute or so: told once, then counted
            line = problem.line()
            self.told[line] = seen = self.told.get(line, 0) + 1
            if seen == 1 or seen % REPEATS_TOLD_EVERY == 0:
                self.reporter.warn(line if seen == 1 else f"{line} ({seen} times)")
        if problems and not no_vm and self.vm_running is not None and self.vm_running() is False:
            no_vm, self.lost_at = True, status.updated_at
        if not no_vm:
            self._new_window()
            self.told = {}
        elif problems:
            if not all(getattr(p, "queued", False) for p in problems):
                self.only_queued, self.error_since = False, self.error_since or time.monotonic()
            everywhere = [p for p in problems if getattr(p, "kind", "other") == "every-region"]
            if not (getattr(self.last, "kind", "") == "every-region" and not everywhere):
                self.last = (everywhere or problems)[-1]  # the error that decides is the one told
            self.since = self.since or time.monotonic()
            self.kinds |= {getattr(p, "kind", "other") for p in problems}
            self.rules_out += [p.rules_out for p in problems if hasattr(p, "rules_out")]
        now = time.monotonic()
        if not self._over(now):
            return
        running = self.vm_running() if self.vm_running is not None else False
        if running:
            self._new_window()  # a VM: its status will come
        elif running is None:
            pass  # the group could not be asked: nothing is moved on a guess; asked again next poll
        else:
            raise VmCreationError(
                self.run_id,
                round((now - self.since) / 60, 2),  # the whole window without a VM: the run's wait so far
                self.last.line(),
                hint=self.last.hint,
                kinds=frozenset(self.kinds),
                rules_out=tuple(self.rules_out),
            )


class StatusMissing(InfraError):
    """No status.json within the target's appear timeout: nothing started the trainer (the stack is torn down)."""


def give_up_time(run_id: str, max_run_hours: float, grace_s: float = 15 * 60) -> float | None:
    """When following should stop waiting: the run's hard limit plus time for the VM side to act."""
    started = run_started_at(run_id)
    return None if started is None else started + max_run_hours * 3600 + grace_s


def vm_startup_error(bucket: Bucket, lang: str, run_id: str) -> str | None:
    """The first note a VM's start-up script left in `<run>/vm/` (images/trainer/startup.sh), if any."""
    notes = [k for k in bucket.list(run_key(lang, run_id, "vm/")) if k.endswith("-startup-error.txt")]
    return bucket.read_bytes(notes[0]).decode("utf-8", "replace").strip() or notes[0] if notes else None
