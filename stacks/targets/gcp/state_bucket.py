"""The Terraform state bucket: created by `trainctl bootstrap`, since Terraform cannot create its own backend."""

from __future__ import annotations

from dataclasses import dataclass

from stacks.config import EnvConfig
from stacks.errors import InfraError
from stacks.targets.gcp import api


@dataclass(frozen=True)
class StateBucket:
    name: str
    location: str
    created: bool  # False: it existed already (bootstrap is idempotent)
    versioning: bool


def ensure_state_bucket(config: EnvConfig, client=None) -> StateBucket:
    """Create the env's state bucket (versioned, uniform access, public access prevention) unless it exists."""
    from google.api_core import exceptions
    from google.cloud import storage

    name = config.gcp.state_bucket_name
    try:
        client = client or api.storage_client(config.gcp.project)
        bucket = client.lookup_bucket(name)
        created = bucket is None
        if created:
            bucket = storage.Bucket(client, name=name)
            bucket.versioning_enabled = True  # an overwritten state file can always be recovered
            bucket.iam_configuration.uniform_bucket_level_access_enabled = True
            bucket.iam_configuration.public_access_prevention = "enforced"
            bucket = client.create_bucket(bucket, project=config.gcp.project, location=config.gcp.region)
        elif not bucket.versioning_enabled:
            bucket.versioning_enabled = True
            bucket.patch()
    except exceptions.Conflict as exc:
        raise InfraError(
            f"bucket name gs://{name} is taken by another project",
            hint="bucket names are global: set `state_bucket:` in the env's overlay",
        ) from exc
    except api.client_failures() as exc:
        raise api.google_error(
            exc,
            f"creating or reading the state bucket gs://{name}",
            project=config.gcp.project,
            api_name="Cloud Storage API",
            service="storage.googleapis.com",
            role="roles/storage.admin",
        ) from exc
    return StateBucket(
        name=name,
        location=(bucket.location or config.gcp.region).lower(),
        created=created,
        versioning=bool(bucket.versioning_enabled),
    )
