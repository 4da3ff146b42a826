"""Each simulated VM as a local process: the real VM agent (`python -m trainer.launchers.vm run`) with the
metadata its template and per-instance config carry, as startup.sh starts it in the trainer container.

What the VM's host does around the agent is done here as images/trainer/startup.sh and shutdown.sh do it:
the GPUs the template attaches are what the agent's hardware check sees (TRAINSTACK_GPU_PROBE, a driver the
image accepts); a preemption, or a deletion, drops the shutdown flag and sends SIGTERM (not a preemption in a
scenario whose `shutdown_script` is false: the agent's watch of instance/preempted is all the notice the VM
gets); what is left is killed `notice_s` wall seconds after the deletion (a checkpoint takes real time,
however fast the simulated clock); an agent exit other than 0 (the run ended and the agent handled it) or 143
(stopped by a preemption or the shutdown script) stops billing as startup.sh's `fatal` does, by resizing the
group to 0. Preemptions triggered by a stage or an epoch read the run's log.txt from its bucket (the local
market's rule), only the lines this boot of the VM wrote: a resumed run's log, and its status.json, hold what
an earlier VM trained.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from stacks.targets.gcp.sim.cloud import Instance, SimCloud
from trainer.launchers.vm.spec import JOIN_TIMEOUT_S

SIMULATED_DRIVER = "580.95.05"  # what cos-extensions would install: the image's minimum branch or newer
LOG_READ_DEADLINE_S = 10.0  # wall seconds a preemption trigger's read of the run log may take, retries included
KEEP_RUNNING = (0, 143)  # startup.sh: the run ended and the agent handled it / stopped by shutdown.sh


@dataclass
class VmProcess:
    vm: Instance
    proc: subprocess.Popen
    log: Path
    state_dir: Path


@dataclass
class BootLog:
    """The run's log as one boot of a VM sees it: the pieces there at boot are skipped, the lines after kept."""

    cursor: object = None
    lines: list[str] = field(default_factory=list)


def _kill_vm(proc: subprocess.Popen) -> None:
    """A VM's deletion: its agent and every process under it end at once, the trainers torchrun starts in sessions
    of their own too. Stopped first, then killed: an orphan's parent is init, no longer found under the agent."""
    tree: list[int] = []
    for _ in range(3):  # a process forked while the tree was being stopped is found on the next pass
        found = _tree(proc.pid)
        for pid in set(found) - set(tree):
            _signal(pid, signal.SIGSTOP)
        if found == tree:
            break
        tree = found
    for pid in tree:
        _signal(pid, signal.SIGKILL)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it, by their parents in /proc (`pid` alone where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:  # stat: "pid (comm) state ppid ...", comm may hold spaces and parentheses
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return sorted(found)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class VmRunner:
    """Starts, signals and stops the agent processes of the sim's VMs as their states change."""

    def __init__(
        self,
        cloud: SimCloud,
        endpoint: str,
        metadata_host: Callable[[str], str],
        workdir: Path,
        *,
        trainer_cmd: str | None = None,
        env: dict[str, str] | None = None,
        say: Callable[[str], None] = print,
        notice_s: float = 30.0,
    ):
        self.cloud, self.endpoint, self.metadata_host = cloud, endpoint, metadata_host
        self.workdir, self.trainer_cmd, self.env, self.say = workdir, trainer_cmd, env or {}, say
        # A deleted VM's processes get this long (wall seconds) after SIGTERM before they are killed: the trainer's
        # checkpoint takes real time whatever the simulated clock's speed (Spot's notice: 30 s).
        self.notice_s = notice_s
        self.running: dict[str, VmProcess] = {}
        self.exits: list[tuple[str, int]] = []  # (VM name, agent exit code), in order
        self.boots: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._buckets: dict[str, object] = {}
        self._boot_logs: dict[str, BootLog] = {}  # VM name -> its current boot's view of the run log

    def __enter__(self) -> "VmRunner":
        self.cloud.listeners.append(self.on_event)
        self.cloud.log_of = self.log_of
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.cloud.listeners.remove(self.on_event)
        with self._lock:
            for item in self.running.values():
                if item.proc.poll() is None:
                    _kill_vm(item.proc)
                    item.proc.wait()
            self.running.clear()

    def on_event(self, event: str, vm: Instance) -> None:
        with self._lock:
            if event == "running":
                self._start(vm)
                return
            item = self.running.get(vm.name)
            if item is None or item.proc.poll() is not None:
                return
            silent = vm.preempted and not self.cloud.scenario.shutdown_script
            if event == "stopping" and silent:  # the notice only on the metadata server (instance/preempted)
                self.say(f"simulated VM {vm.name}: preempted; its shutdown script does not run")
            elif event == "stopping":  # shutdown.sh: the flag, then SIGTERM to the trainer container
                (item.state_dir / "shutting-down").touch()
                item.proc.send_signal(signal.SIGTERM)
                self.say(f"simulated VM {vm.name}: {'preempted' if vm.preempted else 'stopping'}, SIGTERM sent")
            elif event == "gone":
                flag = item.state_dir / "shutting-down"
                if not flag.exists() and not silent:  # deleted with its group: the shutdown script runs then too
                    flag.touch()
                    item.proc.send_signal(signal.SIGTERM)
                proc = item.proc
                timer = threading.Timer(self.notice_s, lambda: proc.poll() is None and _kill_vm(proc))
                timer.daemon = True
                timer.start()
                self.say(f"simulated VM {vm.name}: deleted")

    def _start(self, vm: Instance) -> None:
        boot = self.boots[vm.name] = self.boots.get(vm.name, 0) + 1
        state_dir = self.workdir / vm.name / f"boot-{boot}"
        state_dir.mkdir(parents=True, exist_ok=True)
        gpus = sum(vm.shape.accelerators.values()) or 1
        env = {
            **os.environ,
            "GCE_METADATA_HOST": self.metadata_host(vm.name),
            "TRAINSTACK_COMPUTE_ENDPOINT": self.endpoint,
            "TRAINSTACK_GPU_PROBE": json.dumps({"gpus": gpus, "driver": SIMULATED_DRIVER}),
            "TRAINSTACK_SHUTDOWN_FLAG": str(state_dir / "shutting-down"),
            "TRAINSTACK_WORK_ROOT": str(self.workdir / vm.name / "work"),
            # the agent's wait for the group to bring its nodes back, in simulated time as the group's own pace
            "TRAINSTACK_JOIN_TIMEOUT_S": f"{JOIN_TIMEOUT_S / self.cloud.scenario.speedup:g}",
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        cmd = [sys.executable, "-m", "trainer.launchers.vm", "run"]
        if self.trainer_cmd:
            cmd += ["--trainer-cmd", self.trainer_cmd]
        self.booted(vm)
        log = state_dir / "agent.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.running[vm.name] = VmProcess(vm, proc, log, state_dir)
        self.say(f"simulated VM {vm.name} in {vm.zone}: running the VM agent (boot {boot}, log {log})")

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                ended = [(n, p) for n, p in self.running.items() if p.proc.poll() is not None]
                for name, _ in ended:
                    del self.running[name]
            for name, item in ended:
                code = item.proc.returncode
                self.exits.append((name, code))
                self.say(f"simulated VM {name}: the agent exited with code {code}")
                if code not in KEEP_RUNNING and code >= 0:  # not killed by the VM's deletion
                    self._stop_billing(item.vm)

    def _stop_billing(self, vm: Instance) -> None:
        """startup.sh's `fatal`: resize the VM's group to 0."""
        for group in list(self.cloud.groups.values()):
            if vm.name in group.instances:
                self.say(f"simulated VM {vm.name}: start-up script resizes {group.name} to 0 (fatal exit)")
                self.cloud.resize(group.scope, group.name, 0)

    def _run_of(self, vm: Instance) -> tuple[object, str, str] | None:
        """The run's bucket, language and id from the VM's metadata (None: not a training VM)."""
        meta = vm.shape.metadata
        uri, lang, run_id = (meta.get(f"trainstack-{k}") for k in ("bucket", "lang", "run-id"))
        if not (uri and lang and run_id):
            return None
        if uri not in self._buckets:
            self._buckets[uri] = self._log_reader(uri)
        return self._buckets[uri], lang, run_id

    def _log_reader(self, uri: str):
        """The bucket as the cloud's preemption triggers read it: a poll that is asked again at the next one,
        so a call gives up after seconds, and its retries are said as the simulated cloud's own."""
        from dataclasses import replace
        from urllib.parse import urlparse

        from trainer.storage import open_bucket
        from trainer.storage.gcs import GcsBucket
        from trainer.storage.policy import StoragePolicy

        parsed = urlparse(uri)
        if parsed.scheme != "gs":
            return open_bucket(uri)
        policy = StoragePolicy.from_env()
        return GcsBucket(
            parsed.netloc,
            parsed.path,
            policy=replace(policy, deadline_s=min(policy.deadline_s, LOG_READ_DEADLINE_S)),
            report=lambda note: self.say(f"simulated cloud reading a run log: {note}"),
        )

    def booted(self, vm: Instance) -> BootLog:
        """Where the run log stands as `vm` boots: its stage-triggered preemptions read only what comes after."""
        from trainer.runfiles.keys import run_key

        boot, run, error = BootLog(), None, None
        try:
            run = self._run_of(vm)
        except Exception as exc:
            error = exc
        for _ in range(3 if run is not None else 0):
            bucket, lang, run_id = run
            try:
                boot.cursor = bucket.read_appended(run_key(lang, run_id, "log.txt"))[1]
                break
            except Exception as exc:  # the simulated storage's hiccup: asked again, then the whole log counts
                error = exc
        else:
            if error is not None:
                self.say(f"simulated VM {vm.name}: the run log could not be read at boot ({error}): it all counts")
        self._boot_logs[vm.name] = boot
        return boot

    def log_of(self, vm: Instance) -> list[str]:
        """The lines of the run log this boot of `vm` wrote, from the bucket its metadata names ([] when unread)."""
        from trainer.runfiles.keys import run_key

        boot = self._boot_logs.setdefault(vm.name, BootLog())
        try:
            run = self._run_of(vm)
            if run is not None:
                bucket, lang, run_id = run
                chunk, boot.cursor = bucket.read_appended(run_key(lang, run_id, "log.txt"), boot.cursor)
                boot.lines += chunk.decode(errors="replace").splitlines()
        except Exception:  # a bucket that cannot be read now: the lines come at the next read
            pass
        return boot.lines
