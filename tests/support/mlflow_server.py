"""A real MLflow tracking server for tests: `mlflow server` on 127.0.0.1 with an SQLite backend store and
a local artifact root, and the fault proxy (tests/support/gcs_proxy.py) in front of it for 503, 401 and a
connection cut mid-export. No mock of the client: trainctl talks HTTP to the server MLflow ships."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.support.gcs_proxy import GcsProxy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MlflowServer:
    proc: subprocess.Popen
    url: str  # the server itself
    proxy: GcsProxy  # the same server through the fault proxy: `proxy.url`
    root: Path

    def stop(self) -> None:
        self.proxy.stop()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_mlflow(root: Path, *, timeout_s: float = 120) -> MlflowServer:
    """The server, answering /health, or RuntimeError with its log's tail."""
    port = _free_port()
    exe = Path(sys.executable).parent / "mlflow"
    log = open(root / "mlflow-server.log", "wb")
    proc = subprocess.Popen(
        [
            str(exe),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
        ],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        # the GenAI job runners (huey consumers, ~10 processes): nothing here uses them
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return MlflowServer(proc, url, GcsProxy(url).start(), root)
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("mlflow server did not start: " + (root / "mlflow-server.log").read_text()[-2000:])
