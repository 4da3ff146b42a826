"""TrainerIdentity: the service account the training VMs run as, and nothing more than it needs."""
from __future__ import annotations

from cdktf import ITerraformDependable
from cdktf_cdktf_provider_google.artifact_registry_repository import ArtifactRegistryRepository
from cdktf_cdktf_provider_google.artifact_registry_repository_iam_member import ArtifactRegistryRepositoryIamMember
from cdktf_cdktf_provider_google.project_iam_custom_role import ProjectIamCustomRole
from cdktf_cdktf_provider_google.project_iam_member import ProjectIamMember
from cdktf_cdktf_provider_google.service_account import ServiceAccount
from cdktf_cdktf_provider_google.storage_bucket import StorageBucket
from cdktf_cdktf_provider_google.storage_bucket_iam_member import StorageBucketIamMember
from constructs import Construct

from stacks.naming import RESIZER_ROLE, TRAINER_SA

# Resizing a group needs update on the group only: the instance deletions that follow
# are made by the Compute service agent, not by the caller.
RESIZE_PERMISSIONS = ["compute.instanceGroupManagers.get", "compute.instanceGroupManagers.update"]


class TrainerIdentity(Construct):
    """Exposes `account`, `resize_role` and the IAM `grants` given to the account."""

    def __init__(self, scope: Construct, id: str, *, project: str, bucket: StorageBucket,
                 repository: ArtifactRegistryRepository, group_prefix: str,
                 depends_on: list[ITerraformDependable] | None = None) -> None:
        super().__init__(scope, id)
        self.account = ServiceAccount(
            self, "account", project=project, account_id=TRAINER_SA, display_name="trainstack trainer VMs",
            description="Runs the trainer container; reads/writes its bucket, stops its own instance group",
            depends_on=depends_on,
        )
        member = f"serviceAccount:{self.account.email}"
        self.resize_role = ProjectIamCustomRole(
            self, "resize_role", project=project, role_id=RESIZER_ROLE, title="trainstack group resizer",
            description="Lets a training VM resize its own managed instance group to zero",
            permissions=RESIZE_PERMISSIONS,
        )
        self.grants = [
            StorageBucketIamMember(self, "bucket_objects", bucket=bucket.name, role="roles/storage.objectAdmin",
                                   member=member),
            ArtifactRegistryRepositoryIamMember(
                self, "registry_reader", project=project, location=repository.location,
                repository=repository.name, role="roles/artifactregistry.reader", member=member),
            ProjectIamMember(self, "log_writer", project=project, role="roles/logging.logWriter", member=member),
            ProjectIamMember(self, "metric_writer", project=project, role="roles/monitoring.metricWriter",
                             member=member),
            ProjectIamMember(
                self, "group_resizer", project=project, role=self.resize_role.name, member=member,
                condition={
                    "title": "training groups only",
                    "description": f"instance groups named {group_prefix}*",
                    "expression": ('resource.type == "compute.googleapis.com/InstanceGroupManager" && '
                                   f'resource.name.extract("instanceGroupManagers/{{name}}").startsWith("{group_prefix}")'),
                }),
        ]
