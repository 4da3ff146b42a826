"""One way to call Google's REST APIs: an authorized session, a bounded call, Google's own error words.

Every `TRAINSTACK_<API>_ENDPOINT` variable replaces an API's https://<host> with a plain
http://127.0.0.1:PORT (tests serve recorded responses there) and drops authentication.
Google libraries are imported inside functions (`trainctl --help` stays fast).
"""
from __future__ import annotations

import os
import re

from stacks.errors import InfraError

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
HTTP_TIMEOUT_S = 30


def session(endpoint_env: str, *, quota_project: str | None = None):
    """(session, base URL override): anonymous on an override (tests), else ADC bearer tokens
    (a user's ADC without a quota project is billed to `quota_project`, the env's project)."""
    override = os.environ.get(endpoint_env)
    if override:
        import requests

        return requests.Session(), override.rstrip("/")
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.auth.transport.requests import AuthorizedSession

    try:
        credentials, _ = google.auth.default(scopes=SCOPES)
    except DefaultCredentialsError as exc:
        raise InfraError(f"no Google credentials: {exc}", hint="run `gcloud auth application-default login`") from exc
    # A user's ADC without a quota project bills API calls to nowhere useful; a service account
    # bills its own project already (and setting one would need serviceusage.services.use).
    from google.oauth2.credentials import Credentials as UserCredentials

    if quota_project and isinstance(credentials, UserCredentials) and not credentials.quota_project_id:
        credentials = credentials.with_quota_project(quota_project)
    return AuthorizedSession(credentials), None


def call(session, method: str, url: str, what: str, **kwargs):
    """One HTTP call; a transport or token failure becomes InfraError saying `what` failed."""
    import requests
    from google.auth.exceptions import GoogleAuthError

    try:
        return session.request(method, url, timeout=HTTP_TIMEOUT_S, **kwargs)
    except GoogleAuthError as exc:
        raise InfraError(f"{what}: could not get an access token: {exc}",
                         hint="run `gcloud auth application-default login`") from exc
    except requests.RequestException as exc:
        raise InfraError(f"{what}: {exc}", hint="check the network, then retry") from exc


def api_message(resp) -> str:
    """The message of a Google error body, else the start of whatever came back."""
    try:
        return resp.json()["error"]["message"]
    except Exception:  # not a Google error body
        return resp.text[:300] or resp.reason


def exception_message(exc) -> str:
    """Google's own words in a client library's error, without the REST transport's "GET <url>: "."""
    return re.sub(r"^[A-Z]+ \S+: ", "", str(getattr(exc, "message", exc)))
