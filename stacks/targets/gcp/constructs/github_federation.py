"""GithubFederation: lets one GitHub repository's Actions act as the CI accounts, keyless."""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import ITerraformDependable
from stacks.naming import WIF_POOL, WIF_PROVIDER
from stacks.targets.gcp.cdk_google import (
    IamWorkloadIdentityPool,
    IamWorkloadIdentityPoolProvider,
    ServiceAccount,
    ServiceAccountIamMember,
)

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
# Runs a fork author cannot start on main: no pull_request_target, workflow_run, issue_comment...
DEPLOY_EVENTS = ("push", "workflow_dispatch", "schedule")
PLAN_EVENT = "pull_request"


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def federation_expressions(repository_id: int, owner_id: int, deploy_ref: str) -> tuple[dict[str, str], str]:
    """(attribute mapping, attribute condition) of the GitHub provider, as CEL text.

    Repository and owner are pinned by their numeric ids (GitHub's `repository_id` and
    `repository_owner_id` claims), so a renamed or re-created repository of the same name
    gets nothing. Event and ref are separate claims: the `sub` claim changes with GitHub
    `environment:` jobs and cannot be relied on.
    """
    mapping = {
        "google.subject": "assertion.sub",
        "attribute.repository": "assertion.repository",  # audit logs only; trust uses the ids
        "attribute.repository_id": "assertion.repository_id",
        "attribute.event_name": "assertion.event_name",
        "attribute.ref": "assertion.ref",
        # What the bindings match on: <repository id>:<event> and <repository id>:<event>@<ref>.
        "attribute.repository_event": 'assertion.repository_id + ":" + assertion.event_name',
        "attribute.repository_event_ref": 'assertion.repository_id + ":" + assertion.event_name + "@" + assertion.ref',
    }
    condition = (
        f'assertion.repository_id == "{repository_id}" && assertion.repository_owner_id == "{owner_id}" && '
        f'(assertion.event_name == "{PLAN_EVENT}" || '
        f'(assertion.event_name in {_cel_list(DEPLOY_EVENTS)} && assertion.ref == "{deploy_ref}"))'
    )
    return mapping, condition


class GithubFederation(Construct):
    """Exposes `pool`, `provider` and the `bindings` that let the repository impersonate CI accounts.

    Pull requests of the repository may plan; only push, workflow_dispatch and schedule runs
    on `deploy_ref` (main) may deploy.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: str,
        repository: str,
        repository_id: int,
        repository_owner_id: int,
        planner: ServiceAccount,
        deployer: ServiceAccount,
        deploy_ref: str = "refs/heads/main",
        depends_on: list[ITerraformDependable] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.pool = IamWorkloadIdentityPool(
            self,
            "pool",
            project=project,
            workload_identity_pool_id=WIF_POOL,
            display_name="trainstack GitHub",
            description=f"GitHub Actions of {repository} (id {repository_id})",
            depends_on=depends_on,
        )
        mapping, condition = federation_expressions(repository_id, repository_owner_id, deploy_ref)
        self.provider = IamWorkloadIdentityPoolProvider(
            self,
            "provider",
            project=project,
            workload_identity_pool_id=self.pool.workload_identity_pool_id,
            workload_identity_pool_provider_id=WIF_PROVIDER,
            display_name="GitHub OIDC",
            oidc={"issuer_uri": GITHUB_ISSUER},
            attribute_mapping=mapping,
            # Tokens of any other repository or owner, and of other events or refs, are rejected
            # before any binding is considered.
            attribute_condition=condition,
        )
        self.provider.add_override(
            "//.checkov.skip.CKV_GCP_125",
            "the check wants an exact `assertion.sub` match; trust here is pinned by the repository_id and "
            "repository_owner_id claims (immune to renames) plus event_name and ref, because `sub` changes with "
            "GitHub environment jobs and customisable sub templates",
        )
        principals = f"principalSet://iam.googleapis.com/{self.pool.name}"
        self.bindings = [
            ServiceAccountIamMember(
                self,
                "planner_wif",
                service_account_id=planner.name,
                role="roles/iam.workloadIdentityUser",
                member=f"{principals}/attribute.repository_event/{repository_id}:{PLAN_EVENT}",
            ),
            *(
                ServiceAccountIamMember(
                    self,
                    f"deployer_wif_{event}",
                    service_account_id=deployer.name,
                    role="roles/iam.workloadIdentityUser",
                    member=f"{principals}/attribute.repository_event_ref/{repository_id}:{event}@{deploy_ref}",
                )
                for event in DEPLOY_EVENTS
            ),
        ]
