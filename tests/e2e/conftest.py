"""Fixtures of the end-to-end tests: a project with the French sample pushed, and one French run trained
once for the tests that only read it."""

from __future__ import annotations

import socket

import pytest

from tests.support.project import SAMPLE, TINY_SETS, make_project
from tests.support.trainctl import only_run, trainctl


@pytest.fixture
def staged(project):
    r = trainctl(project, "data", "push", "fr", str(SAMPLE / "fr"))
    assert r.returncode == 0, r.stdout + r.stderr
    yield project
    # Whatever a test did, leave nothing running.
    trainctl(project, "destroy", "fr")


@pytest.fixture(scope="session")
def trained_fr(tmp_path_factory):
    """(project, run id, the `trainctl train fr` that made it): the tiny settings, with tracking pointed at
    a port nothing listens on, so the command must end as it would without a tracker. Read, never changed."""
    root = make_project(tmp_path_factory.mktemp("trained") / "proj")
    r = trainctl(root, "data", "push", "fr", str(SAMPLE / "fr"))
    assert r.returncode == 0, r.stdout + r.stderr
    with socket.socket() as s:  # bound, never listening: a connection is refused at once
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}"
        train = trainctl(root, "train", "fr", *TINY_SETS, "--set", f"tracking.mlflow.uri={down}")
    yield root, only_run(root, "fr"), train
    trainctl(root, "destroy", "fr")
