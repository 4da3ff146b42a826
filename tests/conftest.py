"""Shared fixtures: an isolated project folder, a real GCS API server; each test folder's kind as its marker.

Helpers and fakes live in tests/support; tests/<kind>/ says what a test needs (README "Tests")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cores import pin_this_worker
from tests.support.gcs_proxy import start_emulator
from tests.support.project import make_project

TESTS = Path(__file__).parent
KINDS = ("unit", "integration", "synth", "e2e")  # the folders; `pytest -m "not e2e"` etc. select by them


def pytest_configure(config):
    pin_this_worker()


def pytest_collection_modifyitems(items):
    for item in items:
        kind = Path(item.fspath).relative_to(TESTS).parts[0]
        if kind in KINDS:
            item.add_marker(kind)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A fresh project checkout (envs/, cdktf.json) as the working directory."""
    root = make_project(tmp_path / "proj")
    monkeypatch.chdir(root)
    monkeypatch.delenv("TRAINCTL_ENV", raising=False)
    return root


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    """gcp-storage-emulator on 127.0.0.1 (a real GCS JSON API server), behind a GcsProxy."""
    # The emulator behind the proxy (tests/support/gcs_proxy.py): preconditions as real Cloud Storage
    # checks them, and faults a test asks for.
    proc, proxy = start_emulator(tmp_path_factory.mktemp("gcs"))
    yield proxy
    proxy.stop()
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def gcs_proxy(gcs_server):
    """The session's proxy, its faults and recorded requests cleared before and after the test."""
    gcs_server.clear()
    yield gcs_server
    gcs_server.clear()


@pytest.fixture
def gcs_env(gcs_proxy, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_proxy.url)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test-project")
    return gcs_proxy.url


@pytest.fixture(autouse=True)
def no_live_billing_catalog(monkeypatch):
    """Costs on gcp read the Cloud Billing Catalog: never the real one from a test (a closed
    local port, so the price book falls back at once); tests of the catalog serve recordings."""
    from stacks.targets.gcp.pricing import ENDPOINT_ENV

    monkeypatch.setenv(ENDPOINT_ENV, "http://127.0.0.1:9")


@pytest.fixture(autouse=True)
def no_tracker_from_the_shell(monkeypatch):
    """trainctl honours MLflow's own variables: a developer's shell that sets them must not make the tests
    mirror into a real tracker (a test that wants one sets them itself)."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
