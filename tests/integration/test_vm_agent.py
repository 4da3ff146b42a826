"""The VM agent (`python -m trainer.launchers.vm`) against a text metadata server, a recorded Compute API
and the GCS emulator, with a fake trainer instead of fastai (tests/fixtures/vm/fake_trainer.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.project import REPO  # noqa: E402
from tests.support.recorded_api import FIXTURES, RecordedApi
from trainer.launchers.vm.agent import end_reason
from trainer.launchers.vm.metadata import MetadataClient, MetadataError
from trainer.launchers.vm.signals import Forwarder
from trainer.launchers.vm.spec import JOIN_TIMEOUT_S, VmSpec, build_command, command_env, node_rank
from trainer.runfiles.status_file import FAILED, RUNNING, SUCCEEDED, RunStatus, read_status, write_status
from trainer.runfiles.timestamps import now_iso
from trainer.storage import open_bucket

FAKE = FIXTURES / "vm" / "fake_trainer.py"
PROJECT, ZONE, MIG = "test-project", "europe-west4-a", "train-fr"
RESIZE = rf"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/{MIG}/resize"
RECREATE = rf"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/{MIG}/recreateInstances"


class MetadataServer:
    """The GCE metadata server as far as the agent sees it: plain text, Metadata-Flavor required."""

    def __init__(self, values: dict[str, str]):
        self.values, self.seen = values, []

    def __enter__(self) -> "MetadataServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                server.seen.append(self.path)
                prefix = "/computeMetadata/v1/"
                value = server.values.get(self.path[len(prefix) :]) if self.path.startswith(prefix) else None
                if self.headers.get("Metadata-Flavor") != "Google":
                    code, value = 403, "Missing Metadata-Flavor:Google header."
                else:
                    code, value = (200, value) if value is not None else (404, "Not Found")
                data = value.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/text")
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def host(self) -> str:
        return "127.0.0.1:%d" % self._server.server_address[1]

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def run_id_at(when: datetime) -> str:
    return when.strftime("%Y%m%d-%H%M%S-") + "ab12"


class Vm:
    """One VM of a run: its metadata, the bucket, the recorded Compute API, the agent process."""

    def __init__(
        self,
        tmp_path: Path,
        gcs: str,
        *,
        mode: str,
        nodes: int = 1,
        name: str = "train-fr-x7k2",
        max_run_hours: str = "4",
        run_id: str | None = None,
        extra: dict | None = None,
    ):
        self.bucket_uri = f"gs://test-bucket/vm-{tmp_path.name}"
        self.bucket = open_bucket(self.bucket_uri)
        self.run_id = run_id or run_id_at(datetime.now(timezone.utc))
        self.mark = tmp_path / "mark.jsonl"
        args = ["--lang", "fr", "--bucket", self.bucket_uri, "--env", "dev", "--mode", mode, "--mark", str(self.mark)]
        attrs = {
            "trainstack-image": "europe-west4-docker.pkg.dev/p/trainstack/trainer:3f2a",
            "trainstack-run-id": self.run_id,
            "trainstack-args": json.dumps(args),
            "trainstack-lang": "fr",
            "trainstack-env": "dev",
            "trainstack-bucket": self.bucket_uri,
            "trainstack-nodes": str(nodes),
            "trainstack-gpus-per-node": "1",
            "trainstack-shm-size": "16g",
            "trainstack-docker-flags": "[]",
            "trainstack-max-run-hours": max_run_hours,
            "trainstack-project": PROJECT,
            "trainstack-zone": ZONE,
            "trainstack-mig": MIG,
            "trainstack-base-name": "train-fr",
            **(extra or {}),
        }
        self.metadata = {f"instance/attributes/{k}": v for k, v in attrs.items()}
        self.metadata["instance/name"] = name
        self.gcs = gcs
        self.shutdown_flag = tmp_path / "state" / "shutting-down"  # shutdown.sh's, as mounted from the host
        self.hardware = {"gpus": 1, "driver": "580.95.05"}
        self.work = tmp_path / "work" / self.run_id  # the trainer's --work-dir (trainer.launchers.vm.kept)

    def start(self, md: MetadataServer, api: RecordedApi, *action: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "GCE_METADATA_HOST": md.host,
            "TRAINSTACK_COMPUTE_ENDPOINT": api.url,
            "STORAGE_EMULATOR_HOST": self.gcs,
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "TRAINSTACK_GRACE_S": "1",
            "TRAINSTACK_SETTLE_S": "0.5",
            "TRAINSTACK_REJOIN_PAUSE_S": "0",
            "TRAINSTACK_SHUTDOWN_FLAG": str(self.shutdown_flag),
            # The node's GPUs as the agent's hardware check sees them (no GPU here).
            "TRAINSTACK_GPU_PROBE": json.dumps(self.hardware),
            "TRAINSTACK_WORK_ROOT": str(self.work.parent),
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
        }
        action = action or ("run", "--trainer-cmd", f"{sys.executable} {FAKE}")
        return subprocess.Popen(
            [sys.executable, "-m", "trainer.launchers.vm", *action],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, *action: str, timeout: float = 60) -> tuple[int, str, list]:
        """Runs the agent to the end: (exit code, output, resize requests)."""
        with (
            MetadataServer(self.metadata) as md,
            RecordedApi(
                {
                    ("POST", RESIZE): (200, "vm/resize_operation.json"),
                    ("POST", RECREATE): (200, "vm/recreate_operation.json"),
                }
            ) as api,
        ):
            proc = self.start(md, api, *action)
            out, _ = proc.communicate(timeout=timeout)
            self.recreations = [json.loads(r.body)["instances"] for r in api.requests("POST", RECREATE)]
            return proc.returncode, out, api.requests("POST", RESIZE)

    def status(self) -> RunStatus | None:
        return read_status(self.bucket, "fr", self.run_id)

    def events(self) -> list:
        return [json.loads(line) for line in self.mark.read_text().splitlines()] if self.mark.exists() else []


def assert_one_resize_to_zero(resizes, out):
    assert len(resizes) == 1, out
    assert resizes[0].query == {"size": ["0"]}, resizes[0].query


def test_success_on_rank_0_resizes_once(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="succeed")
    code, out, resizes = vm.run()
    assert code == 0, out
    assert_one_resize_to_zero(resizes, out)
    assert vm.status().state == SUCCEEDED
    argv = vm.events()[0]
    assert argv[-4:] == ["--run-id", vm.run_id, "--work-dir", str(vm.work)] and argv.count("--run-id") == 1
    assert "operation-1795342500000" in out  # the operation the API answered is logged
    (record,) = [k for k in vm.bucket.list(f"fr/runs/{vm.run_id}/metadata/instances/")]
    assert json.loads(vm.bucket.read_bytes(record))["rank"] == 0 and "/instances/" in record


def test_failed_status_resizes_and_exits_with_the_trainer_code(tmp_path, gcs_env):
    # A Python error (FAILED written, exit 1) is the code's: never restarted, even with exit code 1 named.
    vm = Vm(tmp_path, gcs_env, mode="fail", extra=restarts_on_errors(3, "1"))
    code, out, resizes = vm.run()
    assert code == 1, out
    assert_one_resize_to_zero(resizes, out)
    assert vm.status().error == "ValueError: boom"  # the trainer's own error is kept
    assert len(vm.events()) == 1 and restart_records(vm) == []


def test_silent_death_is_marked_failed_then_resized(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="silent")
    code, out, resizes = vm.run()
    assert code == 3, out
    assert_one_resize_to_zero(resizes, out)
    status = vm.status()
    assert status.state == FAILED and "code 3" in status.error and status.finished_at


@pytest.mark.parametrize("nodes,name", [(1, "train-fr-x7k2"), (2, "train-fr-0")], ids=["one-vm", "node-0-of-2"])
def test_sigterm_is_forwarded_and_leaves_the_group_alone(tmp_path, gcs_env, nodes, name):
    vm = Vm(tmp_path, gcs_env, mode="sleep", nodes=nodes, name=name)
    with MetadataServer(vm.metadata) as md, RecordedApi({("POST", RESIZE): (200, "vm/resize_operation.json")}) as api:
        proc = vm.start(md, api)
        deadline = time.monotonic() + 30
        while not vm.events() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert vm.events(), "the fake trainer never started"
        proc.send_signal(signal.SIGTERM)  # what the shutdown script's docker kill does on preemption
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 143, out
        assert api.requests("POST", RESIZE) == []
    assert vm.events()[-1] == "SIGTERM"
    status = vm.status()
    assert status.state == "RUNNING" and status.stage == "interrupted"  # resumable, not FAILED


@pytest.mark.parametrize(("nodes", "name"), [(1, "train-fr-x7k2"), (2, "train-fr-1")])
def test_a_driver_too_old_for_the_image_fails_the_run_at_once_and_stops_the_group(tmp_path, gcs_env, nodes, name):
    # Issue 38: torch sees no GPU under a pre-580 driver and the trainer would train on the CPU at GPU prices.
    vm = Vm(tmp_path, gcs_env, mode="succeed", nodes=nodes, name=name)
    vm.hardware = {"gpus": 0, "driver": "570.172.08"}
    code, out, resizes = vm.run()
    assert code == 1, out
    assert vm.events() == []  # the trainer never started
    assert_one_resize_to_zero(resizes, out)  # from any node: every node has the same driver
    status = vm.status()
    assert status.state == FAILED and "NVIDIA driver 570.172.08" in status.error and "gpu_driver" in status.error


def test_a_node_without_its_gpus_fails_the_run_naming_what_it_saw(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="succeed")
    vm.hardware = {"gpus": 0, "driver": None}
    code, out, resizes = vm.run()
    assert code == 1 and vm.events() == [], out
    assert_one_resize_to_zero(resizes, out)
    assert "sees 0 of the 1 GPU(s)" in vm.status().error and "no NVIDIA driver" in vm.status().error


def test_a_driver_that_did_not_load_gets_a_new_vm_within_the_restarts_on_errors(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="succeed", extra={"trainstack-max-restarts-on-errors": "1"})
    vm.hardware = {"gpus": 0, "driver": None}
    code, out, resizes = vm.run()
    assert code == 143 and vm.events() == [] and resizes == [], out  # the group left as is, as for a preemption
    assert vm.recreations == [[f"zones/{ZONE}/instances/train-fr-x7k2"]]
    assert "restart 1 of 1 after a GPU driver that did not load on train-fr-x7k2" in out
    code, out, resizes = vm.run()  # the new VM's driver did not load either: the limit
    assert code == 1 and vm.recreations == [], out
    assert_one_resize_to_zero(resizes, out)
    assert vm.status().error.endswith("after 1 restart(s): max_restarts_on_errors=1 reached")


@pytest.mark.parametrize("kept_bucket", [None, "gs://test-bucket/elsewhere"])
def test_a_kept_work_folder_is_copied_before_the_group_stops(tmp_path, gcs_env, kept_bucket):
    # Issue 38: what never reached the bucket died with the container when node 0 resized the group to 0.
    vm = Vm(tmp_path, gcs_env, mode="kept", extra={"trainstack-kept-bucket": kept_bucket} if kept_bucket else None)
    code, out, resizes = vm.run()
    assert code == 1, out
    assert_one_resize_to_zero(resizes, out)
    if kept_bucket:
        where, base = open_bucket(kept_bucket), f"fr/{vm.run_id}/train-fr-x7k2"
    else:
        where, base = vm.bucket, f"fr/runs/{vm.run_id}/kept/train-fr-x7k2"
    assert where.read_bytes(f"{base}/models/model.pth") == b"weights that never reached the bucket"
    assert b"model.pth" in where.read_bytes(f"{base}/UPLOAD_FAILED")
    status = vm.status()
    assert status.state == FAILED and status.error.startswith("StorageError: model.pth not uploaded")
    assert where.url(base) in status.error and where.url(base) in out


def test_rank_1_of_2_never_resizes(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="succeed", nodes=2, name="train-fr-1")
    code, out, resizes = vm.run()
    assert code == 0, out
    assert resizes == [] and "node 1 of 2" in out


def test_worker_done_before_node_0_leaves_the_status_alone(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="worker", nodes=2, name="train-fr-1")
    code, out, resizes = vm.run()
    assert code == 0, out
    assert resizes == [] and vm.status().state == "RUNNING"


def test_deadline_stops_the_trainer_marks_failed_and_resizes(tmp_path, gcs_env):
    # Run started now, 0.002 h = 7.2 s budget (room for the agent to start the trainer on a busy machine); the
    # trainer ignores SIGTERM and is killed after the grace (1 s).
    vm = Vm(tmp_path, gcs_env, mode="stubborn", max_run_hours="0.002")
    code, out, resizes = vm.run()
    assert code == 124, out
    assert vm.events()[-1] == "SIGTERM" and "killing it" in out
    assert_one_resize_to_zero(resizes, out)
    status = vm.status()
    assert status.state == FAILED and status.error == "stopped after max_run_hours=0.002"


def test_deadline_already_passed_does_not_start_the_trainer(tmp_path, gcs_env):
    vm = Vm(
        tmp_path,
        gcs_env,
        mode="succeed",
        max_run_hours="1",
        run_id=run_id_at(datetime.now(timezone.utc) - timedelta(hours=2)),
    )
    code, out, resizes = vm.run()
    assert code == 124, out
    assert vm.events() == []
    assert_one_resize_to_zero(resizes, out)
    assert vm.status().error == "stopped after max_run_hours=1"


def test_run_that_already_ended_only_stops_the_group(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="succeed")
    write_status(vm.bucket, RunStatus(run_id=vm.run_id, lang="fr", env="dev", state=SUCCEEDED))
    code, out, resizes = vm.run()
    assert code == 0, out
    assert vm.events() == []
    assert_one_resize_to_zero(resizes, out)


def test_fail_and_stop_group_commands(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="succeed", nodes=2, name="train-fr-1")  # any node may call these
    code, out, resizes = vm.run("fail", "GPU driver did not appear within 600 s")
    assert code == 0, out
    assert_one_resize_to_zero(resizes, out)
    assert vm.status().state == FAILED and vm.status().error == "GPU driver did not appear within 600 s"
    code, out, resizes = vm.run("stop-group")
    assert code == 0, out
    assert_one_resize_to_zero(resizes, out)


def test_one_vm_interrupted_without_a_signal_is_failed_not_preempted(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="interrupt")  # exits 143, stage "interrupted", no SIGTERM here
    code, out, resizes = vm.run()
    assert code == 1, out  # never 143: the host would take it for a preemption and keep the VM
    assert_one_resize_to_zero(resizes, out)
    status = vm.status()
    assert status.state == FAILED and "no SIGTERM reached this VM" in status.error
    assert len(vm.events()) == 1


def restarts_on_errors(most: int, codes: str = "") -> dict:
    return {"trainstack-max-restarts-on-errors": str(most), "trainstack-restart-on-exit-codes": codes}


def restart_records(vm: Vm) -> list[dict]:
    key = f"fr/runs/{vm.run_id}/metadata/restarts.json"
    return json.loads(vm.bucket.read_bytes(key))["restarts"] if vm.bucket.exists(key) else []


def test_an_exit_code_named_for_restart_is_restarted_once_and_the_run_resumes(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="silent-once", extra=restarts_on_errors(2, "75,3"))  # exits 3, then succeeds
    code, out, resizes = vm.run()
    assert code == 0, out
    assert len(vm.events()) == 2 and vm.status().state == SUCCEEDED and vm.status().resumed == 1
    assert_one_resize_to_zero(resizes, out)
    [record] = restart_records(vm)
    assert record["restart"] == 1 and record["exit_code"] == 3 and record["zone"] == ZONE and record["node"] == 0
    line = "restart 1 of 2 after exit code 3 (restart_on_exit_codes)"
    assert line in out and line in vm.bucket.read_appended(f"fr/runs/{vm.run_id}/log.txt")[0].decode()


def test_restarts_on_errors_exhausted_fail_the_run_naming_the_limit(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="silent", extra=restarts_on_errors(1, "3"))  # exits 3 every time
    code, out, resizes = vm.run()
    assert code == 3, out
    assert len(vm.events()) == 2 and len(restart_records(vm)) == 1
    assert_one_resize_to_zero(resizes, out)
    error = vm.status().error
    assert vm.status().state == FAILED and error.endswith(
        "exit code 3 (restart_on_exit_codes) after 1 restart(s): max_restarts_on_errors=1 reached"
    )


def test_a_lost_peer_on_one_vm_is_restarted_as_infrastructure(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="interrupt-once", extra=restarts_on_errors(1))  # 143, stage interrupted, no signal
    code, out, resizes = vm.run()
    assert code == 0, out
    assert len(vm.events()) == 2 and vm.status().state == SUCCEEDED
    [record] = restart_records(vm)
    assert record["cause"].startswith("a trainer process lost its peer (NCCL or gloo; exit 143)")


def test_nodes_that_did_not_meet_again_get_a_new_join_window_within_the_restarts_on_errors(tmp_path, gcs_env):
    # A recreated node 0 finds the run interrupted longer ago than the join timeout: the rendezvous failed, not
    # the code: a restart, whose record starts the next window.
    vm = Vm(tmp_path, gcs_env, mode="succeed", nodes=2, name="train-fr-0", extra=restarts_on_errors(1))
    long_ago = (datetime.now(timezone.utc) - timedelta(seconds=JOIN_TIMEOUT_S + 600)).isoformat(timespec="seconds")
    interrupted = RunStatus(run_id=vm.run_id, lang="fr", env="dev", state=RUNNING, stage="interrupted")
    vm.bucket.write_bytes(f"fr/runs/{vm.run_id}/status.json", replace(interrupted, updated_at=long_ago).to_json())
    code, out, resizes = vm.run()
    assert code == 0 and len(vm.events()) == 1, out
    [record] = restart_records(vm)
    assert record["cause"].startswith("the 2 nodes did not meet again within 30m00s of interruption 1")


def test_interrupted_elsewhere_rejoins_and_the_run_resumes(tmp_path, gcs_env):
    # Node 0's torchrun gave up after node 1's preemption: the agent starts it again to rejoin.
    vm = Vm(tmp_path, gcs_env, mode="interrupt-once", nodes=2, name="train-fr-0")
    code, out, resizes = vm.run()
    assert code == 0, out
    assert len(vm.events()) == 2 and "rejoining the rendezvous on train-fr-0" in out
    assert_one_resize_to_zero(resizes, out)
    assert vm.status().state == SUCCEEDED and vm.status().resumed == 1


@pytest.mark.parametrize("name,rank", [("train-fr-0", 0), ("train-fr-1", 1)])
def test_interrupted_more_than_max_restarts_fails_and_node_0_stops_the_group(tmp_path, gcs_env, name, rank):
    vm = Vm(tmp_path, gcs_env, mode="interrupt", nodes=2, name=name, extra={"trainstack-max-restarts": "1"})
    code, out, resizes = vm.run()
    assert code == 1, out  # not 143: this VM was not preempted, and the run is over
    assert len(vm.events()) == 2  # started, interrupted (1 of 1 allowed), rejoined, interrupted again
    status = vm.status()
    assert status.state == FAILED and status.error == "interrupted 2 times; max_restarts=1 reached"
    assert "status.json: RUNNING, stage 'interrupted', resumed 1 time(s)" in out
    if rank == 0:
        assert_one_resize_to_zero(resizes, out)
    else:
        assert resizes == [] and "node 0 stops the group" in out


def test_recreated_node_past_max_restarts_does_not_start_the_trainer(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="succeed", nodes=2, name="train-fr-0")  # trainstack-max-restarts absent: 3
    write_status(
        vm.bucket, RunStatus(run_id=vm.run_id, lang="fr", env="dev", state=RUNNING, stage="interrupted", resumed=3)
    )
    code, out, resizes = vm.run()
    assert code == 1, out
    assert vm.events() == []
    assert_one_resize_to_zero(resizes, out)
    assert vm.status().error == "interrupted 4 times; max_restarts=3 reached"


def test_multi_node_crash_says_what_status_json_says(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="silent", nodes=2, name="train-fr-0")
    code, out, resizes = vm.run()
    assert code == 3, out
    assert_one_resize_to_zero(resizes, out)
    assert len(vm.events()) == 1  # a crash is not rejoined
    assert (
        vm.status().error == "trainer exited with code 3 without writing a final status; it was at stage 'classifier'"
    )


def test_missing_metadata_is_an_agent_error(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="succeed")
    del vm.metadata["instance/attributes/trainstack-mig"]
    code, out, resizes = vm.run()
    assert code == 70, out  # startup.sh stops the group on any code but 0/143
    assert "trainstack-mig" in out and resizes == [] and vm.events() == []


def spec(nodes: int, gpus: int, base: str = "train-fr", max_restarts: int = 3) -> VmSpec:
    return VmSpec(
        run_id="20261122-101500-ab12",
        lang="fr",
        env="dev",
        bucket="gs://b",
        args=["--lang", "fr"],
        nodes=nodes,
        gpus_per_node=gpus,
        max_run_hours=4,
        project=PROJECT,
        zone=ZONE,
        mig=MIG,
        base_name=base,
        max_restarts=max_restarts,
    )


def test_commands_for_one_and_many_gpus():
    tail = [
        "-m",
        "trainer",
        "--lang",
        "fr",
        "--run-id",
        "20261122-101500-ab12",
        "--work-dir",
        "/home/trainer/work/20261122-101500-ab12",
    ]
    assert build_command(spec(1, 1), 0) == [sys.executable, *tail]
    assert command_env(spec(1, 1)) == {}
    # One VM: torchrun only for its GPUs; the group recreates the VM, torchrun restarts nothing.
    assert build_command(spec(1, 4), 0) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "4",
        "--max-restarts",
        "0",
        *tail,
    ]
    assert command_env(spec(1, 4)) == {}
    assert build_command(spec(1, 1), 0, ["fake"])[0] == "fake"


def test_nodes_meet_through_an_elastic_c10d_rendezvous_on_node_0():
    three = spec(3, 2, max_restarts=5)
    assert build_command(three, 1) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "train-fr-0:29500",
        "--rdzv-id",
        "20261122-101500-ab12",
        "--rdzv-conf",
        f"join_timeout={JOIN_TIMEOUT_S},is_host=0",
        "--nnodes",
        "3",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "5",
        *"-m trainer --lang fr".split(),
        "--run-id",
        "20261122-101500-ab12",
        "--work-dir",
        "/home/trainer/work/20261122-101500-ab12",
    ]
    assert JOIN_TIMEOUT_S >= 1800  # a recreated Spot VM boots, installs its driver and pulls the image first
    node_0 = build_command(three, 0)
    assert node_0[node_0.index("--rdzv-conf") + 1].endswith(",is_host=1")  # node 0 hosts the store
    assert "--node-rank" not in node_0 and "--master-addr" not in node_0  # static rendezvous flags
    assert command_env(three) == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def test_a_rendezvous_endpoint_in_the_metadata_replaces_node_0s_name(monkeypatch, tmp_path, gcs_env):
    """Where the VMs do not resolve each other's names (the simulated cloud: one host), the metadata says where
    node 0's store listens; absent, Compute Engine's `<base>-0:29500` stands (above)."""
    import dataclasses

    told = dataclasses.replace(spec(2, 1), rdzv_endpoint="127.0.0.1:41234")
    node_1 = build_command(told, 1)
    assert node_1[node_1.index("--rdzv-endpoint") + 1] == "127.0.0.1:41234"
    assert told.to_metadata()["trainstack-rdzv-endpoint"] == "127.0.0.1:41234"
    assert "trainstack-rdzv-endpoint" not in spec(2, 1).to_metadata()
    vm = Vm(tmp_path, gcs_env, mode="succeed", nodes=2, name="train-fr-1")
    with MetadataServer(vm.metadata) as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        assert VmSpec.from_metadata(MetadataClient(tries=1)).rendezvous == "train-fr-0:29500"  # absent
        md.values["instance/attributes/trainstack-rdzv-endpoint"] = "127.0.0.1:41234"
        assert VmSpec.from_metadata(MetadataClient(tries=1)).rendezvous == "127.0.0.1:41234"
        md.values["instance/attributes/trainstack-rdzv-endpoint"] = "train-fr-0"
        with pytest.raises(MetadataError, match="trainstack-rdzv-endpoint must be HOST:PORT"):
            VmSpec.from_metadata(MetadataClient(tries=1))


def test_torchrun_accepts_the_commands(monkeypatch):
    """The flags go through this torch's own parser and launch config (nothing is started)."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.run import config_from_args, get_args_parser

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # config_from_args sets it otherwise
    for vm_spec, rank in ((spec(1, 4), 0), (spec(3, 2, max_restarts=5), 0), (spec(3, 2, max_restarts=5), 2)):
        cmd = build_command(vm_spec, rank)
        assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
        args = get_args_parser().parse_args(cmd[3:])
        config, entry, entry_args = config_from_args(args)
        assert args.module and args.training_script == "trainer"
        assert entry_args[-6:-2] == ["--lang", "fr", "--run-id", vm_spec.run_id]
        assert config.nproc_per_node == vm_spec.gpus_per_node
        if vm_spec.nodes == 1:
            assert args.standalone and config.max_restarts == 0
            continue
        assert (config.min_nodes, config.max_nodes) == (3, 3)
        assert (config.rdzv_backend, config.rdzv_endpoint, config.run_id) == (
            "c10d",
            "train-fr-0:29500",
            vm_spec.run_id,
        )
        assert config.max_restarts == 5
        params = RendezvousParameters(
            config.rdzv_backend,
            config.rdzv_endpoint,
            config.run_id,
            config.min_nodes,
            config.max_nodes,
            **config.rdzv_configs,
        )
        assert params.get_as_int("join_timeout") == JOIN_TIMEOUT_S
        assert params.get_as_bool("is_host") is (rank == 0)


def test_max_restarts_comes_from_the_metadata(monkeypatch, tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="succeed", nodes=3, name="train-fr-1")
    with MetadataServer(vm.metadata) as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        assert VmSpec.from_metadata(MetadataClient(tries=1)).max_restarts == 3  # absent: the default
        md.values["instance/attributes/trainstack-max-restarts"] = "7"
        assert VmSpec.from_metadata(MetadataClient(tries=1)).max_restarts == 7
        md.values["instance/attributes/trainstack-max-restarts"] = "-1"
        with pytest.raises(MetadataError, match="max-restarts"):
            VmSpec.from_metadata(MetadataClient(tries=1))


def test_end_reason_counts_interruptions_and_the_join_window():
    now = time.time()
    status = RunStatus(
        run_id="r", lang="fr", env="dev", state=RUNNING, stage="interrupted", resumed=2, updated_at=now_iso()
    )
    assert end_reason(spec(2, 1, max_restarts=3), status, now) is None  # interruption 3 of 3 allowed
    assert end_reason(spec(2, 1, max_restarts=2), status, now) == "interrupted 3 times; max_restarts=2 reached"
    late = end_reason(spec(2, 1, max_restarts=3), status, now + JOIN_TIMEOUT_S + 60)
    assert late.startswith("the 2 nodes did not meet again within 30m00s of interruption 3")


def test_node_rank():
    assert node_rank(spec(1, 1), "anything-x7k2") == 0
    assert node_rank(spec(3, 1), "train-fr-2") == 2
    assert node_rank(spec(3, 1), "train-fr-2.europe-west4-a.c.p.internal") == 2
    assert node_rank(spec(3, 1), "whatever", rank_attr="1") == 1  # the per-instance config's preserved metadata
    for name in ("train-fr-x7k2", "other-1", "train-fr-3"):
        with pytest.raises(MetadataError):
            node_rank(spec(3, 1), name)


def test_deadline_comes_from_the_run_id():
    start = datetime(2026, 11, 22, 10, 15, tzinfo=timezone.utc).timestamp()
    assert spec(1, 1).deadline() == start + 4 * 3600


def test_metadata_client_honours_gce_metadata_host(monkeypatch):
    with MetadataServer({"instance/attributes/trainstack-lang": "fr", "instance/name": "vm-0"}) as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        client = MetadataClient(tries=1)
        assert client.attribute("trainstack-lang") == "fr"
        assert client.get("instance/name") == "vm-0"
        assert client.attribute("trainstack-nodes", "1") == "1"  # 404 -> default
        with pytest.raises(MetadataError, match="trainstack-zone"):
            client.require("trainstack-zone")
    with pytest.raises(MetadataError, match="did not answer"):
        MetadataClient(root=f"http://{md.host}/computeMetadata/v1/", tries=2, backoff_s=0.01).get("instance/name")


# --- the VM going away: a trainer death then is an interruption, never a failure -------------


class PreemptedAfterFirstLook(dict):
    """Metadata whose instance/preempted reads FALSE the first time it is asked, TRUE after."""

    looks = 0

    def get(self, key, default=None):
        if key == "instance/preempted":
            self.looks += 1
            return "FALSE" if self.looks == 1 else "TRUE"
        return super().get(key, default)


def test_the_notice_and_the_shutdown_scripts_sigterm_reach_the_trainer_once():
    """The metadata watch's notice, then the shutdown script's SIGTERM to the agent: one SIGTERM to the trainer."""
    trainer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys\n"
            "signal.signal(signal.SIGTERM, lambda *_: print('SIGTERM', flush=True))\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert trainer.stdout.readline() == "ready\n"
    fwd = Forwarder()
    fwd.child = trainer
    fwd.notice("preemption notice (instance/preempted is TRUE)")
    assert trainer.stdout.readline() == "SIGTERM\n"
    fwd._forward(signal.SIGTERM, None)  # the shutdown script's docker kill, forwarded by the agent's handler
    trainer.stdin.close()  # a second SIGTERM, had it been sent, is handled before this EOF is read
    assert trainer.stdout.read() == "" and trainer.wait(timeout=10) == 0
    assert fwd.signalled


@pytest.mark.parametrize("how", ["preempted", "shutdown-flag"])
@pytest.mark.parametrize("mode", ["silent", "fail-no-status"])
def test_trainer_death_while_the_vm_goes_away_leaves_the_run_resumable(tmp_path, gcs_env, how, mode):
    vm = Vm(tmp_path, gcs_env, mode="silent")  # exits 3 without a final status, no SIGTERM here
    if how == "preempted":  # after the agent's notice watch first looked: the trainer dies before it looks again
        vm.metadata = PreemptedAfterFirstLook(vm.metadata)
    else:
        vm.shutdown_flag.parent.mkdir(parents=True)
        vm.shutdown_flag.write_text("")
    if mode == "fail-no-status":
        vm.metadata["instance/attributes/trainstack-nodes"] = "2"
        vm.metadata["instance/name"] = "train-fr-0"
    code, out, resizes = vm.run()
    assert code == 143, out  # what startup.sh reads as "stopped by the shutdown script"
    assert resizes == []
    status = vm.status()
    assert status.state == RUNNING and status.error is None  # resumable: the next VM picks it up
    assert "counted as an interruption" in out


def test_trainer_death_on_a_vm_that_stays_is_still_a_failure(tmp_path, gcs_env):
    vm = Vm(tmp_path, gcs_env, mode="silent")
    vm.metadata["instance/preempted"] = "FALSE"
    code, out, resizes = vm.run()
    assert code == 3, out
    assert_one_resize_to_zero(resizes, out)
    assert vm.status().state == FAILED


def test_going_away_answers_even_without_a_metadata_server(monkeypatch, tmp_path):
    from trainer.launchers.vm.signals import going_away

    monkeypatch.setenv("TRAINSTACK_SHUTDOWN_FLAG", str(tmp_path / "absent"))
    with MetadataServer({}) as md:
        root = f"http://{md.host}/computeMetadata/v1/"
    assert going_away(MetadataClient(root=root, tries=1)) is None  # server gone: not a reason to fail or stay
    (tmp_path / "absent").write_text("")
    assert going_away(MetadataClient(root=root, tries=1)) == "the shutdown script has started"
