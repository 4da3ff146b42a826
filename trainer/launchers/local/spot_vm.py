"""The local launcher's machine as a Spot VM of the simulated market (trainer.launchers.market):
created only while its zone has capacity (each try without it a creation error, as an instance group's
error list), preempted (SIGTERM, then SIGKILL after the market's notice; no notice: SIGKILL at once) when the
market says so."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from trainer.launchers.trainer_process import GRACE_S

CREATION_RETRY_S = 5.0  # a group retries creating a VM; each try without capacity is one error


class SpotVm:
    """One run's machine in one zone of the market; `state_dir` keeps what fired (shared by every zone)."""

    def __init__(self, market, zone: str, state_dir: Path, args):
        from trainer.launchers.market import MarketRecord

        self.market, self.zone, self.args = market, zone, args
        self.preempted = False  # this VM's trainer was preempted (reset as the next one starts)
        self.record = MarketRecord(state_dir)

    def _say(self, message: str) -> None:
        from trainer.runfiles.keys import run_key
        from trainer.runfiles.timestamps import now_iso
        from trainer.storage import open_bucket

        print(f"trainstack supervisor: {message}", flush=True)
        try:  # the run's own log, as a VM's start-up script notes its boots
            open_bucket(self.args.bucket).append(
                run_key(self.args.lang, self.args.run_id, "log.txt"),
                f"{now_iso().replace('+00:00', 'Z')} spot market: {message}\n".encode(),
            )
        except Exception:
            pass

    def wait_for_capacity(self, stopped) -> bool:
        """Until the zone has capacity (True), or `stopped()` (False); each try without it is an error."""
        if self.market.rung == "on_demand":
            return True
        if self.market.rung == "flex_start":
            return self._wait_in_flex_queue(stopped)
        tried_at, said = None, False
        while not stopped():
            now_s = self.market.now_s()
            if self.market.has_capacity(self.zone, now_s, self.record.fired()):
                if said:
                    self._say(f"Spot capacity back in {self.zone} (market time {now_s:.0f}s): creating the VM")
                return True
            if tried_at is None or time.monotonic() - tried_at >= CREATION_RETRY_S:
                tried_at = time.monotonic()
                self.record.creation_error(
                    self.zone, f"simulated: no Spot capacity for this machine in {self.zone} (market time {now_s:.0f}s)"
                )
                if not said:
                    said = True
                    self._say(f"no Spot capacity in {self.zone} (market time {now_s:.0f}s): the VM waits for it")
            time.sleep(0.2)
        return False

    def _wait_in_flex_queue(self, stopped) -> bool:
        """A flex-start request: queued from the first try, served when the zone's queue says (all nodes at once);
        the group's error list shows it queued, as a resize request's state does."""
        from trainer.launchers.market import FLEX_START_QUEUED

        queued_at = self.market.now_s()
        self._say(f"flex-start request queued in {self.zone} (market time {queued_at:.0f}s)")
        told_at = None
        while not stopped():
            now_s = self.market.now_s()
            if self.market.flex_start_served(self.zone, queued_at, now_s):
                self._say(
                    f"flex-start request served in {self.zone} after {now_s - queued_at:.0f}s of market time: "
                    "every node at once, never preempted"
                )
                return True
            if told_at is None or time.monotonic() - told_at >= CREATION_RETRY_S:
                told_at = time.monotonic()
                self.record.creation_error(
                    self.zone,
                    f"simulated: flex-start request queued in {self.zone} since market time {queued_at:.0f}s",
                    code=FLEX_START_QUEUED,
                )
            time.sleep(0.2)
        return False

    def _log(self):
        from trainer.runfiles.keys import run_key
        from trainer.storage import open_bucket

        return open_bucket(self.args.bucket), run_key(self.args.lang, self.args.run_id, "log.txt")

    def log_seen(self) -> object:
        """The run log's cursor before this VM's trainer starts: its preemptions read only what comes after (a
        resumed run's log already holds the epochs an earlier VM trained)."""
        bucket, key = self._log()
        for _ in range(3):
            try:
                return bucket.read_appended(key)[1]
            except Exception as exc:  # storage hiccup: asked again, then the whole log counts
                error = exc
                time.sleep(0.2)
        self._say(f"could not read the run log before the trainer started ({error}): its whole log counts")
        return None

    def watch(self, child: subprocess.Popen, cursor: object = None):
        """A thread that preempts `child` (SIGTERM, then SIGKILL after the grace) when a preemption is due, reading
        the run log from `cursor` (log_seen's) on."""
        if self.market.rung != "spot":  # flex-start and on-demand VMs are not preempted
            return None
        bucket, log_key = self._log()
        log: list[str] = []

        def loop() -> None:
            nonlocal cursor
            while child.poll() is None:
                chunk, cursor = bucket.read_appended(log_key, cursor)
                log.extend(chunk.decode("utf-8", "replace").splitlines())
                now_s = self.market.now_s()
                due = self.market.due_preemption(self.zone, now_s, self.record.fired(), log)
                if due is not None:
                    self.record.fire(due, now_s)
                    gone = "for good" if due.outage_s is None else f"for {due.outage_s:g}s"
                    self._say(f"Spot VM in {self.zone} preempted (market time {now_s:.0f}s); its zone is dry {gone}")
                    self.preempt(child)
                    return
                time.sleep(0.1)

        thread = threading.Thread(target=loop, name="spot-market", daemon=True)
        thread.start()
        return thread

    def preempt(self, child: subprocess.Popen) -> None:
        """The market's notice: SIGTERM (the trainer saves at the end of its batch), SIGKILL `notice_s` later;
        without notice (0), SIGKILL at once."""
        self.preempted = True  # the supervisor's to read: the trainer's end is the market's doing, not an error
        notice = GRACE_S if self.market.notice_s is None else self.market.notice_s
        if notice > 0:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=notice)
                return
            except subprocess.TimeoutExpired:
                pass
        else:
            self._say("no preemption notice in this market: the VM is killed at once")
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
