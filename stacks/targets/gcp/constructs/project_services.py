"""ProjectServices: the Google APIs the stacks and the trainer call, enabled on the project."""

from __future__ import annotations

from constructs import Construct

from stacks.targets.gcp.cdk_google import ProjectService

APIS = (
    "compute",
    "storage",
    "artifactregistry",
    "iam",
    "logging",
    "monitoring",
    "cloudbuild",
    "cloudquotas",
    "iamcredentials",
    "sts",
    "cloudresourcemanager",
    "serviceusage",
    "cloudbilling",
)


class ProjectServices(Construct):
    """Exposes `services` (API name -> google_project_service) for depends_on."""

    def __init__(self, scope: Construct, id: str, *, project: str, apis: tuple[str, ...] = APIS) -> None:
        super().__init__(scope, id)
        self.services = {
            api: ProjectService(
                self,
                api,
                project=project,
                service=f"{api}.googleapis.com",
                # Turning an API off on destroy would break everything else in the project.
                disable_on_destroy=False,
                disable_dependent_services=False,
            )
            for api in apis
        }

    @property
    def all(self) -> list[ProjectService]:
        return list(self.services.values())
