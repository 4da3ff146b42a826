"""TrainerIdentity: the service account the training VMs run as, and nothing more than it needs."""
from __future__ import annotations

from stacks.cdk import ITerraformDependable
from stacks.targets.gcp.cdk_google import (
    ArtifactRegistryRepository, ArtifactRegistryRepositoryIamMember, ProjectIamCustomRole, ProjectIamMember,
    ServiceAccount, StorageBucket, StorageBucketIamMember)
from constructs import Construct

from stacks.naming import RESIZER_ROLE, TRAINER_SA

# Resizing a group needs update on the group only: the instance deletions that follow are
# made by the Compute service agent, not by the caller. The agent and startup.sh do not wait
# on the resize's zone operation, but `gcloud ... resize` run as this account (by hand on a
# VM) does, and reports a failure after a successful resize without zoneOperations.get.
RESIZE_PERMISSIONS = ["compute.instanceGroupManagers.get", "compute.instanceGroupManagers.update",
                      "compute.zoneOperations.get"]
# What the trainer of a language writes and reads (DESIGN.md, bucket layout).
WRITE_PREFIXES = ("runs/", "lm/", "cache/")
READ_PREFIXES = ("data/",)
OBJECT, BUCKET = "storage.googleapis.com/Object", "storage.googleapis.com/Bucket"


def objects_under(bucket: str, prefixes: list[str]) -> str:
    """IAM condition: objects of `bucket` whose names start with one of `prefixes`.

    Cloud Storage names objects `projects/_/buckets/B/objects/NAME` in conditions; one
    binding per language keeps each expression far below IAM's 12 logical operators.
    """
    names = " || ".join(f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{p}")' for p in prefixes)
    return f'resource.type == "{OBJECT}" && ({names})'


class TrainerIdentity(Construct):
    """Exposes `account`, `resize_role` and the IAM `grants` given to the account.

    Bucket access is per language and per prefix (IAM conditions on object names): write
    `<lang>/runs|lm|cache/`, read `<lang>/data/`, list the bucket; nothing else, so a VM
    cannot touch another language's data nor `_cloudbuild/` (the next image's source).
    """

    def __init__(self, scope: Construct, id: str, *, project: str, bucket: StorageBucket,
                 repository: ArtifactRegistryRepository, languages: list[str],
                 depends_on: list[ITerraformDependable] | None = None) -> None:
        super().__init__(scope, id)
        self.account = ServiceAccount(
            self, "account", project=project, account_id=TRAINER_SA, display_name="trainstack trainer VMs",
            description="Runs the trainer container; reads/writes its languages' prefixes, stops its own group",
            depends_on=depends_on,
        )
        member = f"serviceAccount:{self.account.email}"
        self.resize_role = ProjectIamCustomRole(
            self, "resize_role", project=project, role_id=RESIZER_ROLE, title="trainstack group resizer",
            description="Lets a training VM resize its own managed instance group to zero",
            permissions=RESIZE_PERMISSIONS,
        )
        name = bucket.name_input  # the literal name: conditions compare strings, not references
        self.bucket_grants = [
            # objects.list is checked on the bucket: names are visible, contents are not.
            StorageBucketIamMember(self, "bucket_lister", bucket=bucket.name, role="roles/storage.objectViewer",
                                   member=member, condition={
                                       "title": "list the bucket", "description": "objects.list only",
                                       "expression": f'resource.type == "{BUCKET}"'}),
        ]
        for lang in languages:
            self.bucket_grants += [
                StorageBucketIamMember(
                    self, f"{lang}_writer", bucket=bucket.name, role="roles/storage.objectUser", member=member,
                    condition={"title": f"{lang} run outputs", "description": f"{lang}/runs, lm, cache",
                               "expression": objects_under(name, [f"{lang}/{p}" for p in WRITE_PREFIXES])}),
                StorageBucketIamMember(
                    self, f"{lang}_data_reader", bucket=bucket.name, role="roles/storage.objectViewer",
                    member=member,
                    condition={"title": f"{lang} data", "description": f"{lang}/data",
                               "expression": objects_under(name, [f"{lang}/{p}" for p in READ_PREFIXES])}),
            ]
        self.grants = [
            *self.bucket_grants,
            ArtifactRegistryRepositoryIamMember(
                self, "registry_reader", project=project, location=repository.location,
                repository=repository.name, role="roles/artifactregistry.reader", member=member),
            ProjectIamMember(self, "log_writer", project=project, role="roles/logging.logWriter", member=member),
            ProjectIamMember(self, "metric_writer", project=project, role="roles/monitoring.metricWriter",
                             member=member),
            # Project-wide, without a condition: instance group managers are not among the
            # resource types IAM Conditions evaluate resource names for (docs/DECISIONS.md,
            # "The VM stops its own billing"), so a name condition would deny the resize.
            # The environment's project holds trainstack's groups only.
            ProjectIamMember(self, "group_resizer", project=project, role=self.resize_role.name, member=member),
        ]
