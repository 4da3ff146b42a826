"""CiIdentities: the service accounts GitHub Actions impersonates to plan and to deploy."""
from __future__ import annotations

from cdktf import ITerraformDependable
from cdktf_cdktf_provider_google.project_iam_member import ProjectIamMember
from cdktf_cdktf_provider_google.service_account import ServiceAccount
from cdktf_cdktf_provider_google.service_account_iam_member import ServiceAccountIamMember
from cdktf_cdktf_provider_google.storage_bucket_iam_member import StorageBucketIamMember
from constructs import Construct

from stacks.naming import DEPLOYER_SA, PLANNER_SA

# Read-only roles: enough for `terraform plan -lock=false` of every stack. No roles/viewer.
PLANNER_ROLES = ["roles/compute.viewer", "roles/iam.securityReviewer", "roles/iam.serviceAccountViewer",
                 "roles/iam.workloadIdentityPoolViewer", "roles/artifactregistry.reader",
                 "roles/serviceusage.serviceUsageViewer", "roles/cloudquotas.viewer",
                 "roles/storage.bucketViewer"]
# The deployer applies `train-<lang>` stacks (templates, groups, placement policies);
# the foundation stays an operator's job (it grants IAM).
DEPLOYER_ROLES = ["roles/compute.instanceAdmin.v1", "roles/cloudquotas.viewer",
                  "roles/artifactregistry.reader", "roles/storage.bucketViewer"]


class CiIdentities(Construct):
    """Exposes `planner` and `deployer` (service accounts) and their `grants`."""

    def __init__(self, scope: Construct, id: str, *, project: str, state_bucket: str, trainer_account: ServiceAccount,
                 depends_on: list[ITerraformDependable] | None = None) -> None:
        super().__init__(scope, id)
        self.planner = ServiceAccount(self, "planner", project=project, account_id=PLANNER_SA,
                                      display_name="trainstack CI planner", depends_on=depends_on,
                                      description="Read-only: terraform plan on pull requests")
        self.deployer = ServiceAccount(self, "deployer", project=project, account_id=DEPLOYER_SA,
                                       display_name="trainstack CI deployer", depends_on=depends_on,
                                       description="Applies train-<lang> stacks from the main branch")
        planner, deployer = f"serviceAccount:{self.planner.email}", f"serviceAccount:{self.deployer.email}"
        self.grants = [
            *(ProjectIamMember(self, f"planner_{_slug(r)}", project=project, role=r, member=planner)
              for r in PLANNER_ROLES),
            *(ProjectIamMember(self, f"deployer_{_slug(r)}", project=project, role=r, member=deployer)
              for r in DEPLOYER_ROLES),
            StorageBucketIamMember(self, "planner_state", bucket=state_bucket, role="roles/storage.objectViewer",
                                   member=planner),
            StorageBucketIamMember(self, "deployer_state", bucket=state_bucket, role="roles/storage.objectUser",
                                   member=deployer),
            # Attaching the trainer account to VMs needs actAs on that one account, not project-wide.
            ServiceAccountIamMember(self, "deployer_act_as_trainer", service_account_id=trainer_account.name,
                                    role="roles/iam.serviceAccountUser", member=deployer),
        ]


def _slug(role: str) -> str:
    return role.removeprefix("roles/").replace(".", "_")
