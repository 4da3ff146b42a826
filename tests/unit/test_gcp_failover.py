"""Moving a gcp run where Google Cloud is unkind: zones without the GPU or without quota, errors of several kinds
at once, quotas counted per region and for every region, re-attaching to a run that moved, Ctrl-C while it waits.

`trainctl` against Compute Engine answers served on 127.0.0.1 in the documented shape (tests/support/gcp_train.py;
only Terraform is stood in for), the bucket in the GCS emulator.
"""

from __future__ import annotations

from tests.support.compute_api import compute_api, fixture, with_quotas
from tests.support.gcp_train import LIST_ERRORS_ANY, gcp_train

FALLBACK = ["--set", "gcp.fallback_zones=[europe-west1-b, europe-west1-c]"]


def test_a_zone_without_the_gpu_or_without_quota_is_never_a_failover_candidate(project, gcs_env, monkeypatch):
    # europe-west4-b does not offer the L4; europe-west1 has no L4 quota, Spot or on-demand
    no_l4 = with_quotas(fixture("region_europe-west1.json"), NVIDIA_L4_GPUS=(0, 0), PREEMPTIBLE_NVIDIA_L4_GPUS=(0, 0))
    api = compute_api(ew1=no_l4, not_offered=["europe-west4-b"])
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, fixture("list_errors_zone_exhausted.json"))
    sets = ["--set", "bucket=gs://test-bucket/failover-candidates", *FALLBACK]
    result, calls, zones = gcp_train(project, monkeypatch, api, [*sets, "--set", "defaults.capacity_wait_minutes=0.05"])
    assert result.exit_code == 3, result.output
    assert zones[:3] == ["europe-west4-a", "europe-west4-c", "europe-west4-a"], zones
    assert set(zones) == {"europe-west4-a", "europe-west4-c"}, zones
    assert "no capacity in any of 2 placement(s)" in " ".join(result.output.split())
