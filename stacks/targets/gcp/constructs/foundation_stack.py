"""`foundation`: what every run of an environment shares (APIs, bucket, registry, identities)."""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import GcsBackend, TerraformOutput, TerraformStack
from stacks.config import EnvConfig
from stacks.errors import ConfigError
from stacks.naming import FOUNDATION, node_firewall_name, node_tag, state_prefix
from stacks.targets.gcp.cdk_google import GoogleProvider
from stacks.targets.gcp.constructs.artifact_bucket import ArtifactBucket
from stacks.targets.gcp.constructs.builder_identity import BuilderIdentity
from stacks.targets.gcp.constructs.ci_identities import CiIdentities
from stacks.targets.gcp.constructs.container_registry import ContainerRegistry
from stacks.targets.gcp.constructs.github_federation import GithubFederation
from stacks.targets.gcp.constructs.node_firewall import NodeFirewall
from stacks.targets.gcp.constructs.project_services import ProjectServices
from stacks.targets.gcp.constructs.trainer_identity import TrainerIdentity

CI_KEYS = ("github_repository", "github_repository_id", "github_repository_owner_id")


def require_github_repository(config: EnvConfig) -> None:
    """Exit 2 unless the env names the one repository its CI identities trust (none ships set)."""
    missing = [f"ci.{key}" for key in CI_KEYS if not getattr(config.ci, key)]
    if missing:
        env_file = f"envs/{config.env}.yaml"
        raise ConfigError(
            f"{', '.join(missing)} not set: the foundation lets exactly one GitHub repository's Actions plan "
            "and deploy (Workload Identity Federation), and trainstack ships trusting none",
            source=env_file,
            hint=(
                f"add `ci: {{github_repository: OWNER/NAME, github_repository_id: ID, github_repository_owner_id: "
                f"OWNER_ID}}` to {env_file} (ids: gh api repos/OWNER/NAME --jq '.id, .owner.id'), "
                "or pass them with --set ci.github_repository=OWNER/NAME ..."
            ),
        )


def provider_settings(config: EnvConfig, region: str | None = None) -> dict:
    """The google provider's settings for a stack of `config`'s project.

    user_project_override + billing_project: with user credentials (`gcloud auth application-default
    login`) the provider ignores the credential file's quota project, and Cloud Quotas (the training
    stacks' quota guard) refuses calls without one; the maintainers' fix (hashicorp/
    terraform-provider-google #18337) is these two settings, which need serviceusage.services.use
    on the project (roles/serviceusage.serviceUsageConsumer) for whoever plans (docs/DECISIONS.md).
    """
    return {
        "project": config.gcp.project,
        "region": region or config.gcp.region,
        "user_project_override": True,
        "billing_project": config.gcp.project,
        "default_labels": {"app": "trainstack", "env": config.env},
    }


class FoundationStack(TerraformStack):
    """Composes the shared constructs; exposes them as attributes of the same names."""

    def __init__(self, scope: Construct, id: str = FOUNDATION, *, config: EnvConfig) -> None:
        super().__init__(scope, id)
        require_github_repository(config)
        project, region = config.gcp.project, config.gcp.region
        GoogleProvider(self, "google", **provider_settings(config))
        GcsBackend(self, bucket=config.gcp.state_bucket_name, prefix=state_prefix(config.env, FOUNDATION))
        self.services = ProjectServices(self, "services", project=project)
        after = self.services.all
        self.artifacts = ArtifactBucket(
            self,
            "artifacts",
            project=project,
            name=config.bucket_name,
            location=region.upper(),
            access_log_grant=config.gcp.access_log_grant,
            depends_on=after,
        )
        self.registry = ContainerRegistry(
            self, "registry", project=project, location=region, repository_id=config.gcp.registry, depends_on=after
        )
        self.trainer = TrainerIdentity(
            self,
            "trainer",
            project=project,
            env=config.env,
            bucket=self.artifacts.bucket,
            repository=self.registry.repository,
            languages=sorted(config.languages),
            depends_on=after,
        )
        self.builder = BuilderIdentity(
            self,
            "builder",
            project=project,
            bucket=self.artifacts.bucket,
            repository=self.registry.repository,
            depends_on=after,
        )
        self.ci = CiIdentities(
            self,
            "ci",
            project=project,
            state_bucket=config.gcp.state_bucket_name,
            trainer_account=self.trainer.account,
            env=config.env,
            artifact_bucket=self.artifacts.bucket,
            languages=sorted(config.languages),
            depends_on=after,
        )
        self.firewall = NodeFirewall(
            self,
            "nodes",
            project=project,
            network=config.gcp.network,
            name=node_firewall_name(config.env),
            tag=node_tag(config.env),
            depends_on=after,
        )
        ci = config.ci
        self.github = GithubFederation(
            self,
            "github",
            project=project,
            repository=ci.github_repository,
            repository_id=ci.github_repository_id,
            repository_owner_id=ci.github_repository_owner_id,
            planner=self.ci.planner,
            deployer=self.ci.deployer,
            depends_on=after,
        )
        for name, value in {
            "bucket_url": self.artifacts.bucket.url,
            "registry_id": self.registry.repository.id,
            "trainer_account": self.trainer.account.email,
            "planner_account": self.ci.planner.email,
            "deployer_account": self.ci.deployer.email,
            "builder_account": self.builder.account.email,
            "workload_identity_provider": self.github.provider.name,
        }.items():
            TerraformOutput(self, name, value=value, static_id=True)
