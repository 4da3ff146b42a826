"""QuotaGuard: a plan-time check that the region's GPU quota limit covers the request.

Cloud Quotas reports limits, not usage: the guard catches "this project has no
(or too little) quota for this GPU here" at plan time, while `trainctl` preflight
(regions.get: limit and usage) also catches quota already used by other VMs.
"""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import TerraformLocal
from stacks.targets.gcp.cdk_google import DataGoogleCloudQuotasQuotaInfo
from stacks.targets.gcp.quota import FAMILY_METRICS, quota_id


class QuotaGuard(Construct):
    """Exposes `infos` (one quota data source per metric), `limits` (locals) and `precondition`.

    The precondition passes when any of `metrics` has a limit that covers `needed`: a
    Spot request without a preflight decision accepts Spot or on-demand quota, as the
    preflight does (Spot VMs use on-demand quota where the project has no Spot quota).
    A family quota (H100, H200) holds every GPU family's entries: its limit is `gpu_family`'s.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: str,
        region: str,
        metrics: list[str],
        needed: int,
        gpu_family: str = "",
    ) -> None:
        super().__init__(scope, id)
        self.infos, self.limits, checks = [], [], []
        for metric in metrics:
            slug = metric.lower()
            info = DataGoogleCloudQuotasQuotaInfo(
                self, slug, parent=f"projects/{project}", service="compute.googleapis.com", quota_id=quota_id(metric)
            )
            infos = f"data.{info.terraform_resource_type}.{info.friendly_unique_id}.dimensions_infos"
            # A region's own entry overrides the default entry (no region dimension); -1 =
            # unlimited; `details` is empty when nothing was ever granted; try() keeps a
            # second default entry from failing the plan.
            value = "try(tonumber(d.details[0].value), null)"
            entries = [
                f'try(d.dimensions["region"], "") == "{region}"',
                f'try(d.dimensions["region"], "") == "" && contains(d.applicable_locations, "{region}")',
            ]
            if metric in FAMILY_METRICS:  # per entry: the family's, then that of no family
                entries = [
                    f'{e} && try(d.dimensions["gpu_family"], "") == "{family}"'
                    for e in entries
                    for family in (gpu_family, "")
                ]
            picks = ", ".join(f"try(one([for d in {infos} : {value} if {e}]), null)" for e in entries)
            limit = TerraformLocal(self, f"{slug}_limit", f"${{coalesce({picks}, 0)}}")
            ref = f"local.{limit.friendly_unique_id}"
            checks.append(f"{ref} == -1 || {ref} >= {needed}")
            self.infos.append(info)
            self.limits.append(limit)
        names = " or ".join(metrics) + (f" (gpu_family {gpu_family})" if gpu_family else "")
        self.precondition = {
            "condition": "${" + " || ".join(f"({c})" for c in checks) + "}",
            "error_message": (
                f"GPU quota {names} in {region} is below the {needed} GPU(s) this run needs. "
                f"Request more: https://console.cloud.google.com/iam-admin/quotas?project={project} "
                f"(or run `trainctl quota` to pick another zone)."
            ),
        }
