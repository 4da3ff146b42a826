"""What doctor's checks share: the Resource Manager endpoint, and a failed Google look-up as a problem line."""

from __future__ import annotations

from stacks.config.models import EnvConfig
from stacks.targets.checks import Check
from stacks.targets.gcp import api

RESOURCEMANAGER_ENDPOINT_ENV = "TRAINSTACK_RESOURCEMANAGER_ENDPOINT"
RESOURCEMANAGER_API = "https://cloudresourcemanager.googleapis.com"


def not_found(exc: Exception) -> bool:
    from google.api_core.exceptions import NotFound

    return isinstance(exc, NotFound)


def lookup_failure(exc: Exception, title: str, doing: str, config: EnvConfig) -> Check:
    """A failed Compute look-up as a problem line (a doctor reports, never crashes)."""
    err = api.google_error(
        exc,
        doing,
        project=config.gcp.project,
        api_name="Compute Engine API",
        service="compute.googleapis.com",
        role="roles/compute.viewer",
    )
    return Check(title, False, err.message, err.hint or "")
