"""BuilderIdentity: the service account Cloud Build runs trainer image builds as."""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import ITerraformDependable
from stacks.naming import BUILDER_SA
from stacks.targets.gcp.cdk_google import (
    ArtifactRegistryRepository,
    ArtifactRegistryRepositoryIamMember,
    ProjectIamMember,
    ServiceAccount,
    StorageBucket,
    StorageBucketIamMember,
)
from stacks.targets.gcp.constructs.artifact_bucket import BUILD_SOURCES
from stacks.targets.gcp.constructs.trainer_identity import objects_under


class BuilderIdentity(Construct):
    """Exposes `account` and its `grants`: push to one repository, read build sources, write logs.

    It reads `_cloudbuild/` only (an IAM condition on object names) and writes no object:
    build contexts are uploaded by the operator running `trainctl image build`.

    A dedicated account instead of the project's default compute account, which
    usually holds roles/editor.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: str,
        bucket: StorageBucket,
        repository: ArtifactRegistryRepository,
        depends_on: list[ITerraformDependable] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.account = ServiceAccount(
            self,
            "account",
            project=project,
            account_id=BUILDER_SA,
            display_name="trainstack image builder",
            depends_on=depends_on,
            description="Cloud Build: builds and pushes trainer images",
        )
        member = f"serviceAccount:{self.account.email}"
        self.grants = [
            ArtifactRegistryRepositoryIamMember(
                self,
                "registry_writer",
                project=project,
                location=repository.location,
                repository=repository.name,
                role="roles/artifactregistry.writer",
                member=member,
            ),
            StorageBucketIamMember(
                self,
                "sources_reader",
                bucket=bucket.name,
                role="roles/storage.objectViewer",
                member=member,
                condition={
                    "title": "build contexts",
                    "description": f"{BUILD_SOURCES} only",
                    "expression": objects_under(bucket.name_input, [BUILD_SOURCES]),
                },
            ),
            ProjectIamMember(self, "log_writer", project=project, role="roles/logging.logWriter", member=member),
        ]
