"""stacks.targets.gcp.api.google_error: the one translation of a Google client library's failures (quota look-ups,
doctor's checks, the build context upload, the state bucket) into one line and what to do next."""

from __future__ import annotations

import pytest

pytest.importorskip("google.api_core")

import requests  # noqa: E402
from google.api_core import exceptions as gexc  # noqa: E402
from google.auth import exceptions as auth_exc  # noqa: E402

from stacks.errors import InfraError  # noqa: E402
from stacks.targets.gcp import api  # noqa: E402

KW = dict(project="p1", api_name="Compute Engine API", service="compute.googleapis.com", role="roles/compute.viewer")
DISABLED = [{"reason": "accessNotConfigured", "message": "Compute Engine API has not been used in project p1"}]


@pytest.mark.parametrize(
    "exc, message, hint",
    [
        (
            auth_exc.DefaultCredentialsError("none"),
            "no Google credentials found for the Compute Engine API",
            "gcloud auth application-default login",
        ),
        (
            gexc.Unauthenticated("GET https://x/y: token expired"),
            "Google rejected the credentials reading a: token expired",
            "gcloud auth application-default login",
        ),
        (
            gexc.Forbidden("GET https://x/y: Required 'compute.projects.get' permission"),
            "permission denied reading a: Required 'compute.projects.get' permission",
            "grant roles/compute.viewer on project p1",
        ),
        (
            gexc.Forbidden("API disabled", errors=DISABLED),
            "the Compute Engine API is not enabled in project p1",
            "gcloud services enable compute.googleapis.com --project=p1",
        ),
        (
            gexc.NotFound("GET https://x/y: The resource 'projects/p1' was not found"),
            "reading a: The resource 'projects/p1' was not found",
            "check `gcp.project` ('p1')",
        ),
        (
            requests.exceptions.ConnectionError("refused"),
            "cannot reach the Compute Engine API at http://127.0.0.1:9 reading a: ConnectionError",
            "check the network",
        ),
        (
            gexc.ServiceUnavailable("backend error"),
            "Compute Engine API error reading a: backend error",
            "retry in a minute",
        ),
    ],
    ids=["no-credentials", "rejected", "forbidden", "api-disabled", "not-found", "unreachable", "other"],
)
def test_each_failure_is_one_line_with_what_to_do(exc, message, hint):
    assert isinstance(exc, api.client_failures())
    err = api.google_error(exc, "reading a", where="http://127.0.0.1:9", **KW)
    assert isinstance(err, InfraError) and err.message == message and hint in err.hint


def test_a_bug_is_not_a_cloud_failure():
    """Callers catch client_failures() only: a TypeError in our code keeps its traceback."""
    assert not isinstance(TypeError("x"), api.client_failures())


def test_a_missing_resource_can_say_where_it_comes_from():
    err = api.google_error(gexc.NotFound("no bucket"), "uploading x", missing_hint="deploy the foundation stack", **KW)
    assert err.hint == "deploy the foundation stack"
