"""QuotaGuard: a plan-time check that the region's GPU quota limit covers the request.

Cloud Quotas reports limits, not usage: the guard catches "this project has no
(or too little) quota for this GPU here" at plan time, while `trainctl` preflight
(regions.get: limit and usage) also catches quota already used by other VMs.
"""
from __future__ import annotations

from cdktf import TerraformLocal
from cdktf_cdktf_provider_google.data_google_cloud_quotas_quota_info import DataGoogleCloudQuotasQuotaInfo
from constructs import Construct


def quota_id(metric: str) -> str:
    """Compute's regional metric as Cloud Quotas names it: NVIDIA_L4_GPUS -> NVIDIA-L4-GPUS-per-project-region."""
    return f"{metric.replace('_', '-')}-per-project-region"


class QuotaGuard(Construct):
    """Exposes `info` (the quota data source), `limit` (a local) and `precondition` (for a lifecycle)."""

    def __init__(self, scope: Construct, id: str, *, project: str, region: str, metric: str, needed: int) -> None:
        super().__init__(scope, id)
        self.info = DataGoogleCloudQuotasQuotaInfo(
            self, "info", parent=f"projects/{project}", service="compute.googleapis.com", quota_id=quota_id(metric),
        )
        infos = f"data.{self.info.terraform_resource_type}.{self.info.friendly_unique_id}.dimensions_infos"
        # A region's own entry overrides the default entry (no region dimension); -1 = unlimited;
        # `details` is empty when nothing was ever granted.
        value = "try(tonumber(d.details[0].value), null)"
        self.limit = TerraformLocal(self, "gpu_quota_limit", (
            f'${{coalesce(one([for d in {infos} : {value} if try(d.dimensions["region"], "") == "{region}"]), '
            f'one([for d in {infos} : {value} if try(d.dimensions["region"], "") == "" '
            f'&& contains(d.applicable_locations, "{region}")]), 0)}}'))
        limit = f"local.{self.limit.friendly_unique_id}"
        self.precondition = {
            "condition": f"${{{limit} == -1 || {limit} >= {needed}}}",
            "error_message": (f"GPU quota {metric} in {region} is below the {needed} GPU(s) this run needs. "
                              f"Request more: https://console.cloud.google.com/iam-admin/quotas?project={project} "
                              f"(or run `trainctl quota` to pick another zone)."),
        }
