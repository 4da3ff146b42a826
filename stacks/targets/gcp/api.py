"""One way to call Google's APIs: an authorized session or a client library's client, a bounded call,
and one translation of their failures into InfraError with Google's own words and what to do next.

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
        raise InfraError(
            f"{what}: could not get an access token: {exc}", hint="run `gcloud auth application-default login`"
        ) from exc
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


def compute_client(name: str, endpoint: str | None = None):
    """A google.cloud.compute_v1 client (`ProjectsClient`, `ImagesClient`, ...) over REST; anonymous at
    TRAINSTACK_COMPUTE_ENDPOINT or `endpoint` (tests' recorded responses)."""
    from google.cloud import compute_v1

    from trainer.launchers.vm.group import compute_client_kwargs

    return getattr(compute_v1, name)(**compute_client_kwargs(endpoint))


def storage_client(project: str | None):
    """A google.cloud.storage client billed to the env's project."""
    from google.cloud import storage

    return storage.Client(project=project)


_DISABLED = ("accessNotConfigured", "SERVICE_DISABLED", "has not been used")


def client_failures() -> tuple[type[Exception], ...]:
    """What a Google client library raises when the cloud, the credentials or the network fail (not bugs)."""
    import requests
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError

    return GoogleAPIError, GoogleAuthError, requests.RequestException


def google_error(
    exc: Exception,
    doing: str,
    *,
    project: str | None,
    api_name: str,
    service: str,
    role: str,
    where: str | None = None,
    missing_hint: str | None = None,
) -> InfraError:
    """A client library's failure while `doing` something ("reading project p1") as InfraError: missing or
    rejected credentials, a disabled API, a missing `role`, a missing resource, an unreachable endpoint
    (`where`), or Google's own error. The one translation of every caller of a Google client library."""
    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    login = "gcloud auth application-default login"
    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return InfraError(f"no Google credentials found for the {api_name}", hint=login)
    if isinstance(exc, (gexc.Unauthenticated, auth_exc.RefreshError)):
        return InfraError(f"Google rejected the credentials {doing}: {exception_message(exc)}", hint=login)
    if isinstance(exc, (gexc.Forbidden, gexc.PermissionDenied)):
        text = f"{exc.message} {exc.errors} {getattr(exc, 'details', '')}"
        if any(word in text for word in _DISABLED):
            return InfraError(
                f"the {api_name} is not enabled in project {project}",
                hint=f"gcloud services enable {service} --project={project}",
            )
        return InfraError(
            f"permission denied {doing}: {exception_message(exc)}",
            hint=f"grant {role} on project {project} to the account in use (or sign in as another: {login})",
        )
    if isinstance(exc, gexc.NotFound):
        return InfraError(
            f"{doing}: {exception_message(exc)}",
            hint=missing_hint or f"check `gcp.project` ({project!r}) and that your account can see it",
        )
    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, auth_exc.TransportError)):
        return InfraError(
            f"cannot reach the {api_name} at {where or service} {doing}: {type(exc).__name__}",
            hint="check the network, then retry",
        )
    return InfraError(
        f"{api_name} error {doing}: {exception_message(exc)}",
        hint="retry in a minute; rerun with --debug for the traceback",
    )
