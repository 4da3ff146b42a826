"""ContainerRegistry: the Artifact Registry Docker repository that holds trainer images."""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import ITerraformDependable
from stacks.targets.gcp.cdk_google import ArtifactRegistryRepository
from stacks.targets.gcp.cdk_google import ArtifactRegistryRepositoryCleanupPolicies as Policy


class ContainerRegistry(Construct):
    """Exposes `repository`; images are tagged by content hash, so tags are never moved."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: str,
        location: str,
        repository_id: str,
        keep_recent: int = 10,
        untagged_days: int = 14,
        tagged_days: int = 180,
        depends_on: list[ITerraformDependable] | None = None,
    ) -> None:
        super().__init__(scope, id)
        day = 24 * 3600
        self.repository = ArtifactRegistryRepository(
            self,
            "repository",
            project=project,
            location=location,
            repository_id=repository_id,
            format="DOCKER",
            description="trainstack trainer images (tag = content hash of the build context)",
            docker_config={"immutable_tags": True},
            depends_on=depends_on,
            cleanup_policy_dry_run=False,
            cleanup_policies=[
                # KEEP wins over DELETE: the newest images stay whatever their age.
                Policy(id="keep-recent", action="KEEP", most_recent_versions={"keep_count": keep_recent}),
                Policy(
                    id="delete-untagged",
                    action="DELETE",
                    condition={"tag_state": "UNTAGGED", "older_than": f"{untagged_days * day}s"},
                ),
                Policy(
                    id="delete-old",
                    action="DELETE",
                    condition={"tag_state": "ANY", "older_than": f"{tagged_days * day}s"},
                ),
            ],
        )
        self.repository.add_override(
            "//.checkov.skip.CKV_GCP_84",
            "Google-managed encryption at rest: images hold code and public packages, no data or secrets; "
            "CMEK would need a Cloud KMS key ring (never deletable) and grants to the Artifact Registry agent",
        )
