"""TrainerIdentity: the service account the training VMs run as, and nothing more than it needs."""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import ITerraformDependable
from stacks.naming import RESIZER_ROLE, TRAINER_SA, group_prefix
from stacks.targets.gcp.cdk_google import (
    ArtifactRegistryRepository,
    ArtifactRegistryRepositoryIamMember,
    ProjectIamCustomRole,
    ProjectIamMember,
    ServiceAccount,
    StorageBucket,
    StorageBucketIamMember,
)

# What the stop path calls: instanceGroupManagers.resize (trainer/launchers/vm/group.py, and
# startup.sh's POST .../resize), which checks update on the group only; the instance deletions
# that follow are made by the Compute service agent. Neither reads the group nor waits on the
# zone operation (a zone operation's name could not pass the group condition anyway).
RESIZE_PERMISSIONS = ["compute.instanceGroupManagers.update"]
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


def groups_of(env: str) -> str:
    """IAM condition: instance group managers of `env` (stacks/naming.py group_name), in any zone.

    Compute Engine names them `projects/P/zones/Z/instanceGroupManagers/NAME` in conditions;
    extract() takes NAME whatever the zone (a run may fall back to another region's zone). Where IAM
    gives a request no resource name (a resource type whose names conditions do not evaluate: the
    earlier reading of Google's list for instance group managers), the grant stands as before, so a VM
    can always stop its own billing; where it gives one, only the env's groups pass.
    """
    return (
        f'resource.name == "" || '
        f'resource.name.extract("/instanceGroupManagers/{{name}}").startsWith("{group_prefix(env)}")'
    )


class TrainerIdentity(Construct):
    """Exposes `account`, `resize_role` and the IAM `grants` given to the account.

    Bucket access is per language and per prefix (IAM conditions on object names): write
    `<lang>/runs|lm|cache/`, read `<lang>/data/`, list the bucket; nothing else, so a VM
    cannot touch another language's data nor `_cloudbuild/` (the next image's source).
    The resize role (update on groups, nothing else) is bound with a condition on the group's
    name: `env`'s groups only. Google's "Resource attributes for IAM Conditions" page
    (https://cloud.google.com/iam/docs/conditions-resource-attributes) lists Compute Engine among
    the services whose resource names conditions evaluate; whether its list of resource types holds
    instance group managers could not be read from here, so the condition passes a request without a
    name (groups_of) rather than risk denying the stop path; `trainctl doctor` asks Policy
    Troubleshooter whether the resize of each group is granted (stacks/targets/gcp/access.py).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: str,
        env: str,
        bucket: StorageBucket,
        repository: ArtifactRegistryRepository,
        languages: list[str],
        depends_on: list[ITerraformDependable] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.account = ServiceAccount(
            self,
            "account",
            project=project,
            account_id=TRAINER_SA,
            display_name="trainstack trainer VMs",
            description="Runs the trainer container; reads/writes its languages' prefixes, stops its own group",
            depends_on=depends_on,
        )
        member = f"serviceAccount:{self.account.email}"
        self.resize_role = ProjectIamCustomRole(
            self,
            "resize_role",
            project=project,
            role_id=RESIZER_ROLE,
            title="trainstack group resizer",
            description="Lets a training VM resize its environment's managed instance groups (to zero)",
            permissions=RESIZE_PERMISSIONS,
        )
        self.bucket_grants = self._bucket_grants(bucket, languages, member)
        self.grants = [*self.bucket_grants, *self._project_grants(project, env, repository, member)]

    def _bucket_grants(self, bucket: StorageBucket, languages: list[str], member: str) -> list[StorageBucketIamMember]:
        """Listing the bucket, then each language's prefixes: write its outputs, read its data."""
        name = bucket.name_input  # the literal name: conditions compare strings, not references
        grants = [
            # objects.list is checked on the bucket: names are visible, contents are not.
            StorageBucketIamMember(
                self,
                "bucket_lister",
                bucket=bucket.name,
                role="roles/storage.objectViewer",
                member=member,
                condition={
                    "title": "list the bucket",
                    "description": "objects.list only",
                    "expression": f'resource.type == "{BUCKET}"',
                },
            )
        ]
        for lang in languages:
            grants += [
                StorageBucketIamMember(
                    self,
                    f"{lang}_writer",
                    bucket=bucket.name,
                    role="roles/storage.objectUser",
                    member=member,
                    condition={
                        "title": f"{lang} run outputs",
                        "description": f"{lang}/runs, lm, cache",
                        "expression": objects_under(name, [f"{lang}/{p}" for p in WRITE_PREFIXES]),
                    },
                ),
                StorageBucketIamMember(
                    self,
                    f"{lang}_data_reader",
                    bucket=bucket.name,
                    role="roles/storage.objectViewer",
                    member=member,
                    condition={
                        "title": f"{lang} data",
                        "description": f"{lang}/data",
                        "expression": objects_under(name, [f"{lang}/{p}" for p in READ_PREFIXES]),
                    },
                ),
            ]
        return grants

    def _project_grants(
        self, project: str, env: str, repository: ArtifactRegistryRepository, member: str
    ) -> list[ArtifactRegistryRepositoryIamMember | ProjectIamMember]:
        """Pulling the trainer image, writing logs and metrics, and resizing `env`'s groups (to stop them)."""
        return [
            ArtifactRegistryRepositoryIamMember(
                self,
                "registry_reader",
                project=project,
                location=repository.location,
                repository=repository.name,
                role="roles/artifactregistry.reader",
                member=member,
            ),
            ProjectIamMember(self, "log_writer", project=project, role="roles/logging.logWriter", member=member),
            ProjectIamMember(
                self, "metric_writer", project=project, role="roles/monitoring.metricWriter", member=member
            ),
            ProjectIamMember(
                self,
                "group_resizer",
                project=project,
                role=self.resize_role.name,
                member=member,
                condition={
                    "title": f"{env} groups",
                    "description": f"{group_prefix(env)}* groups",
                    "expression": groups_of(env),
                },
            ),
        ]
