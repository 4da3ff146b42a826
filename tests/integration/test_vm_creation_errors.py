"""VM creation errors of a run's group (instanceGroupManagers.listErrors) while `trainctl train` waits:
recorded responses served on 127.0.0.1 to the real google-cloud-compute client, GCS through the emulator."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.targets.gcp.group_errors import GroupErrors
from stacks.targets.gcp.quota import ENDPOINT_ENV
from tests.support.compute_api import compute_api, fixture
from tests.support.gcp_train import LIST_ERRORS_ANY, NO_ERRORS
from tests.support.gcp_train import gcp_train as _gcp_train
from tests.support.recorded_api import RecordedApi

runner = CliRunner()
LIST_ERRORS = "/compute/v1/projects/p1/zones/europe-west4-a/instanceGroupManagers/dev-train-fr/listErrors"


def test_each_error_of_the_group_is_returned_once():
    with RecordedApi({("GET", LIST_ERRORS): (200, "compute/list_errors_zone_exhausted.json")}) as api:
        errors = GroupErrors("p1", "europe-west4-a", "dev-train-fr", endpoint=api.url)
        first, again = errors.new(), errors.new()
    (error,) = first
    assert again == []
    assert error.code == "ZONE_RESOURCE_POOL_EXHAUSTED" and error.instance.endswith("/dev-train-fr-x7k2")
    assert error.line().startswith(
        "VM creation failed in europe-west4-a (dev-train-fr-x7k2): ZONE_RESOURCE_POOL_EXHAUSTED: The zone"
    )


def test_a_group_not_created_yet_has_no_errors():
    with RecordedApi({("GET", LIST_ERRORS): (404, "compute/error_404_accelerator_type.json")}) as api:
        assert GroupErrors("p1", "europe-west4-a", "dev-train-fr", endpoint=api.url).new() == []


@pytest.mark.parametrize(
    ("recorded", "hint", "tried"),
    [
        ("list_errors_zone_exhausted.json", "fallback_zones", ["europe-west4-a", "europe-west4-b", "europe-west4-c"]),
        # a quota of the region: its other zones are skipped, the pass starts again after its pause
        ("list_errors_quota_exceeded.json", "iam-admin/quotas?project=p1", ["europe-west4-a"] * 3),
    ],
)
def test_no_capacity_in_any_zone_moves_through_them_then_stops_resumable_with_exit_3(
    project, gcs_env, monkeypatch, recorded, hint, tried
):
    from trainer.runfiles.status_file import read_status
    from trainer.storage import open_bucket

    api = compute_api()
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, fixture(recorded))
    bucket = f"gs://test-bucket/creation-{recorded[:20]}"
    result, calls, zones = _gcp_train(
        project, monkeypatch, api, ["--set", f"bucket={bucket}", "--set", "defaults.capacity_wait_minutes=0.05"]
    )
    out = " ".join(result.output.split())
    assert result.exit_code == 3, result.output
    # every zone of `zones` tried in order (each with quota), each apply torn down before the next
    assert zones[:3] == tried, zones
    assert [c[0] for c in calls] == ["apply", "destroy"] * (len(calls) // 2) and len(calls) >= 6
    run_id = calls[0][1]["run_id"]
    assert all(c[1] == {"run_id": run_id} for c in calls)  # one run id throughout
    for zone in sorted(set(tried))[:2]:
        assert f"warning: VM creation failed in {zone} (dev-train-fr-x7k2)" in out
    assert "no capacity for run" in out and f"--resume {run_id}" in out and hint in out
    status = read_status(open_bucket(bucket), "fr", run_id)
    assert status.state == "FAILED" and f"--resume {run_id}" in status.error


def test_on_demand_fallback_takes_on_demand_vms_once_every_spot_zone_is_dry(project, gcs_env, monkeypatch):
    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    api = compute_api()
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, fixture("list_errors_zone_exhausted.json"))
    uri = "gs://test-bucket/creation-on-demand"
    spot_of_synth: list[bool] = []

    def stand_in_vm(zone: str, run_id: str) -> None:
        if not spot_of_synth[-1]:  # on demand: capacity (its group's error list is the old zone's, already seen)
            write_status(
                open_bucket(uri),
                RunStatus(
                    run_id=run_id,
                    lang="fr",
                    env="dev",
                    state="FAILED",
                    stage="classifier",
                    error="the stand-in VM's run",
                ),
            )

    result, calls, zones = _gcp_train(
        project,
        monkeypatch,
        api,
        ["--set", f"bucket={uri}", "--set", "defaults.on_demand_fallback=true"],
        on_apply=stand_in_vm,
        spots=spot_of_synth,
    )
    out = " ".join(result.output.split())
    assert result.exit_code == 1 and "the stand-in VM's run" in out, result.output
    assert spot_of_synth[:4] == [True, True, True, False] and zones[:4] == [
        "europe-west4-a",
        "europe-west4-b",
        "europe-west4-c",
        "europe-west4-a",
    ]
    assert "capacity takes its next rung, on-demand VMs" in out and "(on-demand, europe-west4)" in out


MANAGED = "/compute/v1/projects/p1/zones/europe-west4-a/instanceGroupManagers/dev-train-fr/listManagedInstances"


@pytest.mark.parametrize("group_has_a_vm", [False, True])
def test_a_running_status_with_errors_moves_only_when_the_group_has_no_vm(
    project, gcs_env, monkeypatch, group_has_a_vm
):
    import threading

    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    api = compute_api()
    api.routes[("GET", LIST_ERRORS)] = (200, fixture("list_errors_zone_exhausted.json"))
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, NO_ERRORS)
    vm = {
        "instance": "https://www.googleapis.com/compute/v1/projects/p1/zones/europe-west4-a/instances/dev-train-fr-x7k2",
        "instanceStatus": "RUNNING",
        "currentAction": "NONE",
    }
    api.routes[("POST", MANAGED)] = (200, {"managedInstances": [vm] if group_has_a_vm else []})
    uri = f"gs://test-bucket/creation-late-{group_has_a_vm}"

    def vm_in(zone: str, run_id: str) -> None:
        bucket = open_bucket(uri)
        if zone == "europe-west4-a":  # its trainer said RUNNING once; the group's errors come after
            write_status(bucket, RunStatus(run_id=run_id, lang="fr", env="dev", state="RUNNING", stage="classifier"))
            if group_has_a_vm:  # a healthy run whose status is late: it ends where it is
                threading.Timer(
                    4.0,
                    write_status,
                    [
                        bucket,
                        RunStatus(
                            run_id=run_id,
                            lang="fr",
                            env="dev",
                            state="FAILED",
                            stage="classifier",
                            error="the stand-in VM's run",
                        ),
                    ],
                ).start()
        else:
            write_status(
                bucket,
                RunStatus(
                    run_id=run_id,
                    lang="fr",
                    env="dev",
                    state="FAILED",
                    stage="classifier",
                    error="the stand-in VM's run",
                ),
            )

    result, calls, zones = _gcp_train(project, monkeypatch, api, ["--set", f"bucket={uri}"], on_apply=vm_in)
    assert result.exit_code == 1 and "the stand-in VM's run" in result.output, result.output
    assert api.requests("POST", MANAGED), "the group was never asked"
    assert zones == (["europe-west4-a"] if group_has_a_vm else ["europe-west4-a", "europe-west4-b"])


def test_a_group_that_cannot_be_asked_is_not_moved_on_a_guess(project, gcs_env, monkeypatch):
    from trainer.runfiles.status_file import read_status
    from trainer.storage import open_bucket

    api = compute_api()
    api.routes[("GET", LIST_ERRORS)] = (200, fixture("list_errors_zone_exhausted.json"))
    api.routes[("POST", MANAGED)] = (503, {"error": {"code": 503, "message": "backend unavailable"}})
    uri = "gs://test-bucket/creation-unasked"
    result, calls, zones = _gcp_train(project, monkeypatch, api, ["--set", f"bucket={uri}"], appear_s=3)
    assert result.exit_code == 3 and "wrote no status.json" in result.output, result.output
    assert zones == ["europe-west4-a"] and [c[0] for c in calls] == ["apply", "destroy"]
    assert len(api.requests("POST", MANAGED)) >= 2  # asked at every poll past the limit, never moved
    status = read_status(open_bucket(uri), "fr", calls[0][1]["run_id"])
    assert status.state == "FAILED" and "--resume" in status.error


def test_a_zone_without_capacity_moves_the_run_to_the_next_where_it_runs(project, gcs_env, monkeypatch):
    from stacks.runs.failover import read_journal
    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    api = compute_api()
    api.routes[("GET", LIST_ERRORS)] = (200, fixture("list_errors_zone_exhausted.json"))
    api.routes[("GET", LIST_ERRORS_ANY)] = (200, NO_ERRORS)  # routes match in order: zone a's above
    uri = "gs://test-bucket/creation-moves"

    def vm_in(zone: str, run_id: str) -> None:  # the VM the group creates where there is capacity (its run
        if zone != "europe-west4-a":  # ends at once: no trainer here)
            write_status(
                open_bucket(uri),
                RunStatus(
                    run_id=run_id,
                    lang="fr",
                    env="dev",
                    state="FAILED",
                    stage="classifier",
                    error="the stand-in VM's run",
                ),
            )

    result, calls, zones = _gcp_train(project, monkeypatch, api, ["--set", f"bucket={uri}"], on_apply=vm_in)
    assert result.exit_code == 1 and "the stand-in VM's run" in result.output, result.output
    assert zones == ["europe-west4-a", "europe-west4-b"]
    run_id = calls[0][1]["run_id"]
    assert [c[0] for c in calls] == ["apply", "destroy", "apply", "destroy"]
    out = " ".join(result.output.split())
    assert "moved to zone europe-west4-b" in out
    journal = read_journal(open_bucket(uri), "fr", run_id)
    assert [(p["zone"], p["outcome"]) for p in journal["placements"]] == [
        ("europe-west4-a", "no capacity"),
        ("europe-west4-b", "failed"),
    ]


def test_status_shows_the_group_errors_of_a_starting_run(project, gcs_env, monkeypatch):
    import json

    from trainer.runfiles.keys import TRAINCTL_META, run_key
    from trainer.runfiles.run_ids import new_run_id
    from trainer.storage import open_bucket

    uri = "gs://test-bucket/creation-status"
    run_id = new_run_id()
    open_bucket(uri).write_bytes(run_key("fr", run_id, TRAINCTL_META), json.dumps({"zone": "europe-west4-a"}).encode())
    args = ["--env", "dev", "--set", "gcp.project=p1", "--set", f"bucket={uri}"]
    with RecordedApi({("GET", LIST_ERRORS): (200, "compute/list_errors_quota_exceeded.json")}) as api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        shown = runner.invoke(app, ["status", "fr", *args])
        as_json = runner.invoke(app, ["status", "fr", *args, "--json"])
    assert shown.exit_code == 0, shown.output
    out = " ".join(shown.output.split())
    assert "STARTING" in out and "VM creation errors (the group keeps retrying)" in out
    assert "QUOTA_EXCEEDED: Quota 'PREEMPTIBLE_CPUS' exceeded" in out and "iam-admin/quotas?project=p1" in out
    assert json.loads(as_json.output)["vm_errors"] == [
        "VM creation failed in europe-west4-a (dev-train-fr-x7k2): QUOTA_EXCEEDED: Quota 'PREEMPTIBLE_CPUS' "
        "exceeded.  Limit: 4.0 in region europe-west4."
    ]
