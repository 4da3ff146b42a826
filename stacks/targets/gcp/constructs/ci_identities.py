"""CiIdentities: the service accounts GitHub Actions impersonates to plan and to deploy."""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import ITerraformDependable
from stacks.naming import DEPLOYER_SA, PLANNER_SA
from stacks.targets.gcp.cdk_google import (
    ProjectIamCustomRole,
    ProjectIamMember,
    ServiceAccount,
    ServiceAccountIamMember,
    StorageBucket,
    StorageBucketIamMember,
)
from stacks.targets.gcp.iam_grants import DEPLOYER_PERMISSIONS, DEPLOYER_ROLE_ID, DEPLOYER_ROLES, PLANNER_ROLES

OBJECT, BUCKET = "storage.googleapis.com/Object", "storage.googleapis.com/Bucket"


def state_condition(state_bucket: str, env: str) -> str:
    """Objects of the env's training stacks' states (`<env>/train-<lang>/…`), and listing the bucket."""
    return (
        f'resource.type == "{BUCKET}" || (resource.type == "{OBJECT}" && '
        f'resource.name.startsWith("projects/_/buckets/{state_bucket}/objects/{env}/train-"))'
    )


def runs_condition(bucket: str, lang: str) -> str:
    """A language's run folders (status.json tells `trainctl gc` whether the run ended), and listing
    the bucket: objects.list is checked on the bucket, so an object-only condition refused `gc` its
    listing of `<run>/vm/`."""
    prefix = f"projects/_/buckets/{bucket}/objects/{lang}/runs/"
    return f'resource.type == "{BUCKET}" || (resource.type == "{OBJECT}" && resource.name.startsWith("{prefix}"))'


class CiIdentities(Construct):
    """Exposes `planner` and `deployer` (service accounts), the deployer's `deploy_role` and the `grants`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: str,
        state_bucket: str,
        trainer_account: ServiceAccount,
        env: str = "dev",
        artifact_bucket: StorageBucket | None = None,
        languages: list[str] | None = None,
        depends_on: list[ITerraformDependable] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.planner, self.deployer = self._accounts(project, depends_on)
        self.deploy_role = ProjectIamCustomRole(
            self,
            "deploy_role",
            project=project,
            role_id=DEPLOYER_ROLE_ID,
            title="trainstack CI deployer",
            description="Apply and destroy train-<lang> stacks: templates, groups, placement policies",
            permissions=DEPLOYER_PERMISSIONS,
            depends_on=depends_on,
        )
        planner, deployer = f"serviceAccount:{self.planner.email}", f"serviceAccount:{self.deployer.email}"
        self.grants = [
            *self._project_grants(project, planner, deployer),
            *self._state_grants(state_bucket, env, planner, deployer),
            # Attaching the trainer account to VMs needs actAs on that one account, not project-wide.
            ServiceAccountIamMember(
                self,
                "deployer_act_as_trainer",
                service_account_id=trainer_account.name,
                role="roles/iam.serviceAccountUser",
                member=deployer,
            ),
        ]
        if artifact_bucket is not None:
            self.grants += self._runs_grants(artifact_bucket, languages or [], deployer)

    def _accounts(
        self, project: str, depends_on: list[ITerraformDependable] | None
    ) -> tuple[ServiceAccount, ServiceAccount]:
        """The planner (read-only, pull requests) and the deployer (main branch)."""
        planner = ServiceAccount(
            self,
            "planner",
            project=project,
            account_id=PLANNER_SA,
            display_name="trainstack CI planner",
            depends_on=depends_on,
            description="Read-only: terraform plan on pull requests",
        )
        deployer = ServiceAccount(
            self,
            "deployer",
            project=project,
            account_id=DEPLOYER_SA,
            display_name="trainstack CI deployer",
            depends_on=depends_on,
            description="Applies train-<lang> stacks from the main branch",
        )
        return planner, deployer

    def _project_grants(self, project: str, planner: str, deployer: str) -> list[ProjectIamMember]:
        """The predefined roles of each account, and the deployer's custom role."""
        return [
            *(
                ProjectIamMember(self, f"planner_{_slug(r)}", project=project, role=r, member=planner)
                for r in PLANNER_ROLES
            ),
            *(
                ProjectIamMember(self, f"deployer_{_slug(r)}", project=project, role=r, member=deployer)
                for r in DEPLOYER_ROLES
            ),
            ProjectIamMember(self, "deployer_compute", project=project, role=self.deploy_role.name, member=deployer),
        ]

    def _state_grants(self, state_bucket: str, env: str, planner: str, deployer: str) -> list[StorageBucketIamMember]:
        """The planner reads every state; the deployer reads and writes its env's training stacks' states."""
        return [
            StorageBucketIamMember(
                self, "planner_state", bucket=state_bucket, role="roles/storage.objectViewer", member=planner
            ),
            # Its env's training stacks' states only: never the foundation's (IAM) nor another env's.
            StorageBucketIamMember(
                self,
                "deployer_state",
                bucket=state_bucket,
                role="roles/storage.objectUser",
                member=deployer,
                condition={"title": f"{env} training stacks", "expression": state_condition(state_bucket, env)},
            ),
        ]

    def _runs_grants(
        self, artifact_bucket: StorageBucket, languages: list[str], deployer: str
    ) -> list[StorageBucketIamMember]:
        """The deployer reads each language's run folders (`trainctl gc` checks whether a run ended)."""
        name = artifact_bucket.name_input  # the literal name: conditions compare strings, not references
        # One binding per language keeps each condition far below IAM's 12 logical operators.
        return [
            StorageBucketIamMember(
                self,
                f"deployer_runs_{lang}",
                bucket=artifact_bucket.name,
                role="roles/storage.objectViewer",
                member=deployer,
                condition={"title": f"{lang} runs", "expression": runs_condition(name, lang)},
            )
            for lang in languages
        ]


def _slug(role: str) -> str:
    return role.removeprefix("roles/").replace(".", "_")
