"""GithubFederation: lets one GitHub repository's Actions act as the CI accounts, keyless."""
from __future__ import annotations

from cdktf import ITerraformDependable
from cdktf_cdktf_provider_google.iam_workload_identity_pool import IamWorkloadIdentityPool
from cdktf_cdktf_provider_google.iam_workload_identity_pool_provider import IamWorkloadIdentityPoolProvider
from cdktf_cdktf_provider_google.service_account import ServiceAccount
from cdktf_cdktf_provider_google.service_account_iam_member import ServiceAccountIamMember
from constructs import Construct

from stacks.naming import WIF_POOL, WIF_PROVIDER

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


class GithubFederation(Construct):
    """Exposes `pool`, `provider` and the `bindings` that let the repository impersonate CI accounts.

    Pull requests of the repository may plan; only `deploy_ref` (main) may deploy.
    """

    def __init__(self, scope: Construct, id: str, *, project: str, repository: str, planner: ServiceAccount,
                 deployer: ServiceAccount, deploy_ref: str = "refs/heads/main",
                 depends_on: list[ITerraformDependable] | None = None) -> None:
        super().__init__(scope, id)
        self.pool = IamWorkloadIdentityPool(
            self, "pool", project=project, workload_identity_pool_id=WIF_POOL, display_name="trainstack GitHub",
            description="GitHub Actions of the trainstack repository", depends_on=depends_on,
        )
        self.provider = IamWorkloadIdentityPoolProvider(
            self, "provider", project=project, workload_identity_pool_id=self.pool.workload_identity_pool_id,
            workload_identity_pool_provider_id=WIF_PROVIDER, display_name="GitHub OIDC",
            oidc={"issuer_uri": GITHUB_ISSUER},
            attribute_mapping={
                "google.subject": "assertion.sub",
                "attribute.repository": "assertion.repository",
                "attribute.ref": "assertion.ref",
                # One attribute carrying both, so a principalSet can require repository AND branch.
                "attribute.repository_ref": 'assertion.repository + "@" + assertion.ref',
            },
            # Tokens of any other repository, and of its other events or refs, are rejected
            # before any binding is considered (jobs using GitHub `environment:` are not admitted).
            attribute_condition=(f'assertion.repository == "{repository}" && '
                                 f'(assertion.sub == "repo:{repository}:pull_request" || '
                                 f'assertion.sub == "repo:{repository}:ref:{deploy_ref}")'),
        )
        principals = f"principalSet://iam.googleapis.com/{self.pool.name}"
        self.bindings = [
            ServiceAccountIamMember(self, "planner_wif", service_account_id=planner.name,
                                    role="roles/iam.workloadIdentityUser",
                                    member=f"{principals}/attribute.repository/{repository}"),
            ServiceAccountIamMember(self, "deployer_wif", service_account_id=deployer.name,
                                    role="roles/iam.workloadIdentityUser",
                                    member=f"{principals}/attribute.repository_ref/{repository}@{deploy_ref}"),
        ]
