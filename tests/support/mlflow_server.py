"""A real MLflow tracking server for tests: `mlflow server` on 127.0.0.1 with an SQLite backend store and
a local artifact root, and the fault proxy (tests/support/gcs_proxy.py) in front of it for 503, 401 and a
connection cut mid-export. No mock of the client: trainctl talks HTTP to the server MLflow ships.

With `logins`, the server is MLflow's basic-auth app (`--app-name basic-auth`, from `mlflow[auth]`): every
request needs an account, nobody has a right that was not granted, and `grant` gives an account a
permission on one experiment."""

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


ADMIN = ("admin", "admin-password-1234")  # the basic-auth app's first account (its config file's)


@dataclass
class MlflowServer:
    proc: subprocess.Popen
    url: str  # the server itself
    proxy: GcsProxy  # the same server through the fault proxy: `proxy.url`
    root: Path
    logins: bool = False

    def grant(self, username: str, experiment: str, permission: str) -> str:
        """A new account (password `<username>-password-1234`) with `permission` (READ, EDIT, MANAGE) on the
        experiment named (created by the admin when absent) and on nothing else -> the experiment's id."""
        from mlflow import MlflowClient
        from mlflow.server import get_app_client

        saved = {name: os.environ.get(name) for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
        os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = ADMIN
        try:
            client = MlflowClient(self.url)
            found = client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else client.create_experiment(experiment)
            accounts = get_app_client("basic-auth", tracking_uri=self.url)
            accounts.create_user(username, f"{username}-password-1234")
            accounts.grant_user_permission(username, "experiment", experiment_id, permission)
            return experiment_id
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def stop(self) -> None:
        self.proxy.stop()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _logins_config(root: Path) -> dict[str, str]:
    """The basic-auth app's settings: its own SQLite store, the admin account, no right unless granted."""
    config = root / "basic_auth.ini"
    config.write_text(
        "[mlflow]\n"
        "default_permission = NO_PERMISSIONS\n"
        f"database_uri = sqlite:///{root / 'basic_auth.db'}\n"
        f"admin_username = {ADMIN[0]}\n"
        f"admin_password = {ADMIN[1]}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        # MLflow's own credential cache (off by default): without it every request runs 2-3 scrypt checks,
        # ~0.3 CPU-s, three quarters of what the tests with logins cost
        "auth_cache_ttl_seconds = 600\n"
    )
    return {"MLFLOW_AUTH_CONFIG_PATH": str(config), "MLFLOW_FLASK_SERVER_SECRET_KEY": "tests-only-secret"}


def start_mlflow(root: Path, *, logins: bool = False, timeout_s: float = 120) -> MlflowServer:
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
            *(["--app-name", "basic-auth"] if logins else []),
        ],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        # the GenAI job runners (huey consumers, ~10 processes): nothing here uses them
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **(_logins_config(root) if logins else {})},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return MlflowServer(proc, url, GcsProxy(url).start(), root, logins)
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("mlflow server did not start: " + (root / "mlflow-server.log").read_text()[-2000:])
