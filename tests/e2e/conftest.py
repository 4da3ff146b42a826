"""Fixtures of the end-to-end tests: a project with the French sample pushed."""
from __future__ import annotations

import pytest

from tests.support.project import SAMPLE
from tests.support.trainctl import trainctl


@pytest.fixture
def staged(project):
    r = trainctl(project, "data", "push", "fr", str(SAMPLE / "fr"))
    assert r.returncode == 0, r.stdout + r.stderr
    yield project
    # Whatever a test did, leave nothing running.
    trainctl(project, "destroy", "fr")
