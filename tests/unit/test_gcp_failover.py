"""Moving a gcp run where Google Cloud is unkind: zones without the GPU or without quota, errors of several kinds
at once, quotas counted per region and for every region, re-attaching to a run that moved, Ctrl-C while it waits.

`trainctl` against Compute Engine answers served on 127.0.0.1 in the documented shape (tests/support/gcp_train.py;
only Terraform is stood in for), the bucket in the GCS emulator.
"""

from __future__ import annotations

from tests.support.compute_api import compute_api, fixture, with_quotas
from tests.support.gcp_train import LIST_ERRORS_ANY, NO_ERRORS, errors_of, gcp_train, list_errors

FALLBACK = ["--set", "gcp.fallback_zones=[europe-west1-b, europe-west1-c]"]
SHORT_WAIT = ["--set", "defaults.capacity_wait_minutes=0.05"]  # a run that waits wrongly ends within seconds


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


def _vm_that_ends_the_run(uri: str, dry: tuple[str, ...] = ("europe-west4-a",)):
    """The group's VM where a zone has what the run needs: it ends the run at once (no trainer here)."""
    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    def vm_in(zone: str, run_id: str) -> None:
        if zone not in dry:
            status = RunStatus(run_id=run_id, lang="fr", env="dev", state="FAILED", stage="classifier")
            status.error = f"the stand-in VM's run in {zone}"
            write_status(open_bucket(uri), status)

    return vm_in


def test_a_stockout_mixed_with_other_errors_still_moves_the_run(project, gcs_env, monkeypatch):
    # Compute Engine words one dry zone several ways in one window: a stockout, a VM preempted while it was
    # created (UNSUPPORTED_OPERATION, or said in the message), and an error of no known kind beside them
    api = compute_api()
    api.routes[("GET", list_errors("europe-west4-a"))] = (
        200,
        errors_of(
            ("europe-west4-a", "ZONE_RESOURCE_POOL_EXHAUSTED", "The zone does not have enough resources available."),
            ("europe-west4-a", "UNSUPPORTED_OPERATION", "The operation is not supported for this resource."),
            ("europe-west4-a", "UNKNOWN", "Instance failed to start due to preemption."),
            ("europe-west4-a", "INTERNAL_ERROR", "Internal error. Please try again."),
        ),
    )
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, NO_ERRORS)
    uri = "gs://test-bucket/failover-mixed"
    result, calls, zones = gcp_train(
        project, monkeypatch, api, ["--set", f"bucket={uri}", *SHORT_WAIT], on_apply=_vm_that_ends_the_run(uri)
    )
    assert result.exit_code == 1 and "the stand-in VM's run in europe-west4-b" in result.output, result.output
    assert zones == ["europe-west4-a", "europe-west4-b"]


def test_only_preemptions_in_creation_move_the_run_as_a_stockout_would(project, gcs_env, monkeypatch):
    api = compute_api()
    api.routes[("GET", list_errors("europe-west4-a"))] = (
        200,
        errors_of(("europe-west4-a", "UNSUPPORTED_OPERATION", "The operation is not supported for this resource.")),
    )
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, NO_ERRORS)
    uri = "gs://test-bucket/failover-preempted-in-creation"
    result, calls, zones = gcp_train(
        project, monkeypatch, api, ["--set", f"bucket={uri}", *SHORT_WAIT], on_apply=_vm_that_ends_the_run(uri)
    )
    assert result.exit_code == 1 and "the stand-in VM's run in europe-west4-b" in result.output, result.output
    assert zones == ["europe-west4-a", "europe-west4-b"]


def test_a_regional_quota_error_skips_the_other_zones_of_its_region_at_once(project, gcs_env, monkeypatch):
    api = compute_api()
    api.routes[("GET", list_errors("europe-west4-a"))] = (200, fixture("list_errors_quota_exceeded.json"))
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, NO_ERRORS)
    uri = "gs://test-bucket/failover-regional-quota"
    result, calls, zones = gcp_train(
        project,
        monkeypatch,
        api,
        ["--set", f"bucket={uri}", *FALLBACK, *SHORT_WAIT],
        on_apply=_vm_that_ends_the_run(uri),
    )
    assert result.exit_code == 1 and "the stand-in VM's run in europe-west1-b" in result.output, result.output
    # PREEMPTIBLE_CPUS of europe-west4 is short in europe-west4-b and -c too: never applied there
    assert zones == ["europe-west4-a", "europe-west1-b"], zones
    assert "skipping zone europe-west4-b" in " ".join(result.output.split())


def test_a_global_quota_error_stops_the_run_naming_the_quota(project, gcs_env, monkeypatch):
    from trainer.runfiles.status_file import read_status
    from trainer.storage import open_bucket

    api = compute_api()
    api.routes[("GET", LIST_ERRORS_ANY)] = (
        200,
        errors_of(
            ("europe-west4-a", "ZONE_RESOURCE_POOL_EXHAUSTED", "The zone does not have enough resources available."),
            ("europe-west4-a", "QUOTA_EXCEEDED", "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 8.0 globally."),
        ),
    )
    uri = "gs://test-bucket/failover-global-quota"
    result, calls, zones = gcp_train(project, monkeypatch, api, ["--set", f"bucket={uri}", *FALLBACK, *SHORT_WAIT])
    out = " ".join(result.output.split())
    assert result.exit_code == 3, result.output
    assert zones == ["europe-west4-a"], "moved to escape a quota that counts every region"
    assert "Quota 'GPUS_ALL_REGIONS' exceeded" in out and "raise it" in out
    status = read_status(open_bucket(uri), "fr", calls[0][1]["run_id"])
    assert status.state == "FAILED" and "--resume" in status.error
