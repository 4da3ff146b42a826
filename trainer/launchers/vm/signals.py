"""What tells the VM agent its VM is going away, and how the trainer hears it: the SIGTERM/SIGINT the agent gets
(the shutdown script's, or an operator's), the preemption notice read by long-polling the metadata server, and the
quick question asked when a trainer ended on its own."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from trainer.launchers.vm import log
from trainer.launchers.vm.metadata import MetadataClient, MetadataError

SHUTDOWN_FLAG = "/run/trainstack/shutting-down"
PREEMPTED_KEY = "instance/preempted"  # FALSE, TRUE from the preemption notice on
NOTICE_POLL_S = 60  # one long poll's timeout_sec: the server answers at once when the value changes
NOTICE_RETRY_S = 5  # between two reads when the metadata server does not answer


class Forwarder:
    """SIGTERM/SIGINT handlers for the agent's whole run: remember the signal, pass SIGTERM to the trainer once
    (the preemption notice read from the metadata server and the shutdown script's SIGTERM both come: the second
    changes nothing)."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.event = threading.Event()
        self._told: subprocess.Popen | None = None  # the trainer process that got its SIGTERM
        self._lock = threading.RLock()  # the notice thread and the signal handler (re-entrant: same thread too)

    @property
    def signalled(self) -> bool:
        return self.event.is_set()

    def stop_child(self) -> bool:
        """SIGTERM to the running trainer unless it got one already; True when this call sent it."""
        with self._lock:
            child = self.child
            if child is None or child is self._told or child.poll() is not None:
                return False
            self._told = child
            child.send_signal(signal.SIGTERM)
            return True

    def _forward(self, signum, _frame) -> None:
        self.event.set()
        told = self._told is not None and self._told is self.child
        log(
            f"got {signal.Signals(signum).name}: "
            + (
                "the trainer was asked to save already"
                if told
                else "forwarding SIGTERM to the trainer (it saves a checkpoint)"
            )
        )
        self.stop_child()

    def notice(self, why: str) -> None:
        """What a SIGTERM does, for a notice read elsewhere (the metadata server); from any thread."""
        first = not self.event.is_set()
        self.event.set()
        log(
            f"{why}: "
            + (
                "SIGTERM to the trainer, which saves a checkpoint at the end of its batch"
                if first
                else "the trainer was asked to save already"
            )
        )
        self.stop_child()

    def __enter__(self) -> "Forwarder":
        self._previous = {sig: signal.signal(sig, self._forward) for sig in (signal.SIGTERM, signal.SIGINT)}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def sleep(self, seconds: float) -> bool:
        """Waits; True when a signal came meanwhile."""
        return self.event.wait(max(seconds, 0))


class NoticeWatch:
    """Long-polls instance/preempted while the trainer runs: the moment Compute Engine's preemption notice turns it
    TRUE, the trainer on this node is asked to save (`Forwarder.notice`), whether or not the shutdown script runs
    (a real preemption was seen not to run it). Every node of a run watches its own VM."""

    def __init__(self, md: MetadataClient, fwd: Forwarder, poll_s: float = NOTICE_POLL_S):
        self.md, self.fwd, self.poll_s = md, fwd, poll_s
        self.stopped = threading.Event()

    def __enter__(self) -> "NoticeWatch":
        threading.Thread(target=self._watch, name="preemption-notice", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()  # a long poll under way ends with the process (a daemon thread)

    def _watch(self) -> None:
        etag, unanswered = None, False
        while not self.stopped.is_set():
            try:
                value, etag = self.md.watch(PREEMPTED_KEY, etag, self.poll_s)
            except MetadataError as exc:  # briefly unreachable: asked again; told once
                if not unanswered:
                    log(f"could not watch for a preemption notice ({exc}); asking again every {NOTICE_RETRY_S:g}s")
                    unanswered = True
                if self.stopped.wait(NOTICE_RETRY_S):
                    return
                continue
            if self.stopped.is_set():
                return
            if value is None:
                log(f"the metadata server has no {PREEMPTED_KEY}: the preemption notice is not watched")
                return
            if value.strip().upper() == "TRUE":
                self.fwd.notice(f"preemption notice ({PREEMPTED_KEY} is TRUE)")
                return
            if etag is None and self.stopped.wait(NOTICE_RETRY_S):  # no ETag to wait on: a plain poll
                return


def going_away(md: MetadataClient) -> str | None:
    """Why this VM is going away (preemption, shutdown), or None while it is not.

    Asked once, quickly: during a preemption only ~30 s are left, and an unanswered
    question must not turn into a failure either way.
    """
    flag = os.environ.get("TRAINSTACK_SHUTDOWN_FLAG", SHUTDOWN_FLAG)
    if os.path.exists(flag):
        return "the shutdown script has started"
    try:
        quick = MetadataClient(root=md.root, tries=1, timeout_s=3)
        if (quick.get(PREEMPTED_KEY) or "").strip().upper() == "TRUE":
            return "Compute Engine preempted this Spot VM"
    except MetadataError as exc:
        log(f"could not ask whether this VM was preempted: {exc}")
    return None
