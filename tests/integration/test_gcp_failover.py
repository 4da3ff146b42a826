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


def test_re_attach_with_the_quota_used_by_the_run_itself_follows_its_real_zone_and_moves_it(
    project, gcs_env, monkeypatch
):
    from tests.support.compute_api import REGION
    from tests.support.gcp_train import GcpTrain
    from trainer.runfiles.status_file import INTERRUPTED_STAGE, RunStatus, write_status
    from trainer.storage import open_bucket

    uri = "gs://test-bucket/failover-reattach"
    sets = ["--set", f"bucket={uri}", *SHORT_WAIT]
    api = compute_api()
    world = GcpTrain(project, monkeypatch, api)
    world.install()
    world.push(sets)

    def preempted_at_once(zone: str, run_id: str) -> None:  # its VM trained, then was preempted
        status = RunStatus(run_id=run_id, lang="fr", env="dev", state="RUNNING", stage=INTERRUPTED_STAGE, epoch=1)
        write_status(open_bucket(uri), status)

    world.on_apply = preempted_at_once
    with api:  # started by an earlier trainctl in europe-west4-b (then Ctrl-C)
        first = world.invoke(
            ["train", "fr", "--detach"], [*sets, "--set", "gcp.zones=[europe-west4-b, europe-west4-a]"]
        )
    assert first.exit_code == 0 and world.zones == ["europe-west4-b"], first.output
    run_id = world.terraform.state["run_id"]

    # Now the region's L4 quota is exactly what the run holds, and europe-west4-b has no Spot capacity left.
    region = REGION.format("europe-west4")
    full = with_quotas(fixture("region_europe-west4.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=(3, 3), NVIDIA_L4_GPUS=(1, 1))
    api.routes[("GET", region)] = (200, full)
    api.routes[("GET", list_errors("europe-west4-b"))] = (200, fixture("list_errors_zone_exhausted.json"))
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, NO_ERRORS)
    destroy = world.terraform.destroy

    def destroy_frees_the_quota(variables=None):  # the run's own GPUs go with its group
        destroy(variables)
        api.routes[("GET", region)] = (200, fixture("region_europe-west4.json"))

    world.terraform.destroy = destroy_frees_the_quota
    world.on_apply = _vm_that_ends_the_run(uri, dry=("europe-west4-b",))
    with api:
        again = world.invoke(["train", "fr"], sets)
    out = " ".join(again.output.split())
    assert again.exit_code == 1, again.output
    assert "following it instead" in out and run_id in out
    assert "VM creation failed in europe-west4-b" in out, "the run's own zone was not the one followed"
    assert "moved to zone europe-west4-a" in out and "the stand-in VM's run in europe-west4-a" in out
    assert world.zones == ["europe-west4-b", "europe-west4-a"]


def _interrupted_long_ago(uri: str, run_id: str, minutes: float = 35) -> None:
    """status.json of a run preempted `minutes` ago (its trainer checkpointed and stopped)."""
    import json
    from datetime import datetime, timedelta, timezone

    from trainer.runfiles.status_file import INTERRUPTED_STAGE, RunStatus
    from trainer.storage import open_bucket

    then = (datetime.now(timezone.utc) - timedelta(minutes=minutes)).isoformat(timespec="seconds")
    status = RunStatus(run_id=run_id, lang="fr", env="dev", state="RUNNING", stage=INTERRUPTED_STAGE, epoch=1)
    doc = {**json.loads(status.to_json()), "updated_at": then}
    open_bucket(uri).write_bytes(f"fr/runs/{run_id}/status.json", json.dumps(doc).encode())


def _first_vm_of_two_nodes(uri: str, dry: tuple[str, ...] = ()):
    """The first VM a 2-node group creates where there is capacity: the agent's own check at boot
    (trainer.launchers.vm.agent: an interrupted run whose nodes did not meet within JOIN_TIMEOUT_S ends FAILED),
    then, rejoined, a stand-in for the trainer that ends the run."""
    import time

    from trainer.launchers.interruptions import checkpointed
    from trainer.launchers.vm.agent import end_reason
    from trainer.launchers.vm.spec import VmSpec
    from trainer.runfiles.status_file import RunStatus, mark_failed, read_status, write_status
    from trainer.storage import open_bucket

    def vm_in(zone: str, run_id: str) -> None:
        if zone in dry:
            return
        bucket = open_bucket(uri)
        spec = VmSpec(run_id, "fr", "dev", uri, [], 2, 1, 4, "p1", zone, "dev-train-fr", "dev-train-fr")
        status = read_status(bucket, "fr", run_id)
        if checkpointed(status) and (error := end_reason(spec, status, time.time())):
            mark_failed(bucket, "fr", run_id, "dev", error)
            return
        status = RunStatus(run_id=run_id, lang="fr", env="dev", state="FAILED", stage="classifier")
        status.error = f"the stand-in trainer trained on in {zone}"
        write_status(bucket, status)

    return vm_in


def test_a_two_node_run_that_moves_long_after_its_preemption_trains_on(project, gcs_env, monkeypatch):
    uri = "gs://test-bucket/failover-two-nodes"
    api = compute_api()
    api.routes[("GET", list_errors("europe-west4-a"))] = (200, fixture("list_errors_zone_exhausted.json"))
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, NO_ERRORS)
    first_vm = _first_vm_of_two_nodes(uri, dry=("europe-west4-a",))

    def vm_in(zone: str, run_id: str) -> None:
        if zone == "europe-west4-a":  # trained, preempted; the zone stayed dry for 35 min before the run moved
            _interrupted_long_ago(uri, run_id)
        first_vm(zone, run_id)

    sets = ["--set", f"bucket={uri}", "--set", "defaults.nodes=2", *SHORT_WAIT]
    result, calls, zones = gcp_train(project, monkeypatch, api, sets, on_apply=vm_in)
    assert result.exit_code == 1, result.output
    assert "the stand-in trainer trained on in europe-west4-b" in result.output, result.output
    assert zones == ["europe-west4-a", "europe-west4-b"]


def test_a_resumed_two_node_run_interrupted_long_ago_trains_on(project, gcs_env, monkeypatch):
    from tests.support.gcp_train import GcpTrain
    from trainer.runfiles.run_ids import new_run_id

    uri = "gs://test-bucket/failover-two-nodes-resume"
    sets = ["--set", f"bucket={uri}", "--set", "defaults.nodes=2", *SHORT_WAIT]
    api = compute_api()
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, NO_ERRORS)
    world = GcpTrain(project, monkeypatch, api, on_apply=_first_vm_of_two_nodes(uri))
    world.install()
    world.push(sets)
    run_id = new_run_id()
    _interrupted_long_ago(uri, run_id)  # stopped by Ctrl-C and `trainctl destroy` 35 min ago, never FAILED
    with api:
        result = world.invoke(["train", "fr", "--resume", run_id], sets)
    assert result.exit_code == 1, result.output
    assert "the stand-in trainer trained on in europe-west4-a" in result.output, result.output


def test_spot_hours_before_on_demand_fallback_are_priced_at_the_spot_rate(project, gcs_env, monkeypatch):
    """Two hours of a Spot VM, every zone dry, then on_demand_fallback: one hour on demand. trainctl.json says what
    the last apply took (on demand); placements.json says what each placement was."""
    import json

    from stacks.cli.main import app
    from stacks.targets import load_env
    from stacks.targets.gcp.pricing import price_book
    from tests.support.gcp_train import runner
    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    uri, run_id = "gs://test-bucket/cost-fallback", "20261127-100000-ab12"
    bucket = open_bucket(uri)
    status = RunStatus(run_id=run_id, lang="fr", env="dev", state="SUCCEEDED", stage="done")
    write_status(bucket, status)
    doc = {**json.loads(status.to_json()), "finished_at": "2026-11-27T13:00:00+00:00"}
    bucket.write_bytes(f"fr/runs/{run_id}/status.json", json.dumps(doc).encode())
    meta = {"machine_type": "g2-standard-8", "gpu": {"type": "nvidia-l4", "count": 1}, "spot": False, "nodes": 1}
    meta |= {"zone": "europe-west4-a", "region": "europe-west4"}
    bucket.write_bytes(f"fr/runs/{run_id}/metadata/trainctl.json", json.dumps(meta).encode())
    placed = [
        ("europe-west4-a", True, "10:00", "12:00", "no capacity"),
        ("europe-west4-b", True, "12:00", "12:00", "no capacity"),
        ("europe-west4-a", False, "12:00", "13:00", "succeeded"),
    ]
    journal = {
        "placements": [
            {"zone": z, "region": "europe-west4", "spot": spot, "outcome": outcome}
            | {"applied_at": f"2026-11-27T{a}:00+00:00", "ended_at": f"2026-11-27T{e}:00+00:00"}
            for z, spot, a, e, outcome in placed
        ],
        "preemptions": [],
        "capacity_wait_s": 0.0,
    }
    bucket.write_bytes(f"fr/runs/{run_id}/metadata/placements.json", json.dumps(journal).encode())
    for name, booted in (("dev-train-fr-s1", "20261127T100000Z"), ("dev-train-fr-d1", "20261127T120000Z")):
        record = {"zone": "europe-west4-a", "booted_at": booted}
        bucket.write_bytes(f"fr/runs/{run_id}/metadata/instances/{name}/{booted}.json", json.dumps(record).encode())

    args = ["--env", "dev", "--set", "gcp.project=p1", "--set", f"bucket={uri}"]
    result = runner.invoke(app, ["runs", "--lang", "fr", "--json", *args])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    book = price_book(load_env(project / "envs", "dev", args[3::2]), None, ["g2-standard-8"])
    spot, on_demand = (book.vm_per_hour("europe-west4", "g2-standard-8", "nvidia-l4", 1, s)[0] for s in (True, False))
    assert spot < on_demand and row["billed_vm_s"] == 3 * 3600
    assert row["est_cost"] == round(2 * spot + on_demand, 4), (row, spot, on_demand)


def test_a_preempted_spot_vm_is_billed_until_its_preemption_not_while_its_group_waits_for_capacity(
    project, gcs_env, monkeypatch
):
    """A Spot VM booted at 10:00 in europe-west4-a, preempted at 11:00 (deleted: no charge while its group retries),
    recreated under its name at 11:30, preempted again at 12:00; the zone stays dry, the run moves at 12:10 and
    finishes at 13:00 in europe-west4-b. Billed: 1 h + 30 min + 50 min, not the gaps the group waited for capacity."""
    import json

    from stacks.cli.main import app
    from tests.support.gcp_train import runner
    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    uri, run_id = "gs://test-bucket/cost-preempted", "20261127-100000-cd34"
    bucket = open_bucket(uri)
    status = RunStatus(run_id=run_id, lang="fr", env="dev", state="SUCCEEDED", stage="done")
    write_status(bucket, status)
    doc = {**json.loads(status.to_json()), "finished_at": "2026-11-27T13:00:00+00:00"}
    bucket.write_bytes(f"fr/runs/{run_id}/status.json", json.dumps(doc).encode())
    meta = {"machine_type": "g2-standard-8", "gpu": {"type": "nvidia-l4", "count": 1}, "spot": True, "nodes": 1}
    meta |= {"zone": "europe-west4-b", "region": "europe-west4"}
    bucket.write_bytes(f"fr/runs/{run_id}/metadata/trainctl.json", json.dumps(meta).encode())
    at = "2026-11-27T{}:00+00:00".format
    journal = {
        "placements": [
            {"zone": "europe-west4-a", "spot": True, "applied_at": at("10:00"), "ended_at": at("12:10")},
            {"zone": "europe-west4-b", "spot": True, "applied_at": at("12:10"), "ended_at": at("13:00")},
        ],
        "preemptions": [{"zone": "europe-west4-a", "detected_at": at(t)} for t in ("11:00", "12:00")],
        "capacity_wait_s": 0.0,
    }
    bucket.write_bytes(f"fr/runs/{run_id}/metadata/placements.json", json.dumps(journal).encode())
    boots = [("dev-train-fr-a1", "a", "1000"), ("dev-train-fr-a1", "a", "1130"), ("dev-train-fr-b1", "b", "1210")]
    for name, zone, hhmm in boots:
        booted = f"20261127T{hhmm}00Z"
        record = {"zone": f"europe-west4-{zone}", "booted_at": booted}
        bucket.write_bytes(f"fr/runs/{run_id}/metadata/instances/{name}/{booted}.json", json.dumps(record).encode())

    args = ["--env", "dev", "--set", "gcp.project=p1", "--set", f"bucket={uri}"]
    result = runner.invoke(app, ["runs", "--lang", "fr", "--json", *args])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["vm_boots"] == 3 and row["billed_vm_s"] == (60 + 30 + 50) * 60, row


def test_gc_keeps_the_stack_of_a_run_still_moving_through_dry_zones(project, gcs_env, monkeypatch):
    """Started 50 min ago, never a VM (every zone dry so far, no status.json yet), placed again 1 min ago."""
    import json
    from datetime import datetime, timedelta, timezone

    from tests.support.gcp_train import GcpTrain
    from trainer.runfiles.timestamps import now_iso
    from trainer.storage import open_bucket

    uri = "gs://test-bucket/gc-moving"
    run_id = (datetime.now(timezone.utc) - timedelta(minutes=50)).strftime("%Y%m%d-%H%M%S-ab12")
    world = GcpTrain(project, monkeypatch, compute_api())
    world.install()
    world.terraform.state = {"run_id": run_id, "zone": "europe-west4-c"}
    journal = {
        "placements": [
            {"zone": z, "spot": True, "applied_at": now_iso(), "ended_at": None, "outcome": None}
            for z in ("europe-west4-c",)
        ],
        "preemptions": [],
        "capacity_wait_s": 0.0,
    }
    open_bucket(uri).write_bytes(f"fr/runs/{run_id}/metadata/placements.json", json.dumps(journal).encode())
    with world.api:
        result = world.invoke(["gc"], ["--set", f"bucket={uri}"])
    assert result.exit_code == 0, result.output
    assert world.terraform.calls == [], "gc destroyed the stack of a run that is still moving"
    assert f"run {run_id} is STARTING; kept" in " ".join(result.output.split())
