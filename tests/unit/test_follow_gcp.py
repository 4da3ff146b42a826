"""Following a gcp run through its bucket (GCS emulator): a VM that could not start the trainer."""

from __future__ import annotations

import pytest

from stacks.errors import InfraError
from stacks.runs.watch import follow, give_up_time, live_state
from stacks.targets import by_name
from trainer.storage import open_bucket

GCP_APPEAR_S = by_name("gcp").status_appear_timeout_s


class Quiet:
    def info(self, message):
        pass

    def warn(self, message):
        pass

    def log_line(self, line):
        pass

    def progress(self, status):
        pass


def test_startup_error_note_ends_following_with_its_reason(gcs_env):
    bucket = open_bucket("gs://test-bucket/follow1")
    bucket.write_bytes(
        "fr/runs/r9/vm/dev-train-fr-abcd-startup-error.txt",
        b"2026-11-22T10:00:00Z dev-train-fr-abcd: docker pull failed 5 times\n",
    )
    with pytest.raises(InfraError) as err:
        follow(bucket, "fr", "r9", Quiet(), poll_s=0.01, appear_timeout_s=5)
    assert "stopped on its VM" in err.value.message and "docker pull failed 5 times" in err.value.message


def test_no_status_and_no_note_times_out(gcs_env):
    bucket = open_bucket("gs://test-bucket/follow2")
    with pytest.raises(InfraError) as err:
        follow(bucket, "fr", "r1", Quiet(), poll_s=0.05, appear_timeout_s=0.2)
    assert "wrote no status.json" in err.value.message


def test_note_left_after_the_run_started_is_seen_too(gcs_env):
    from trainer.runfiles.status_file import RunStatus, write_status

    bucket = open_bucket("gs://test-bucket/follow3")
    write_status(bucket, RunStatus(run_id="r2", lang="fr", env="dev", state="RUNNING"))
    bucket.write_bytes("fr/runs/r2/vm/n0-startup-error.txt", b"max_run_hours=4 passed: the backstop stopped the group")
    with pytest.raises(InfraError) as err:
        follow(bucket, "fr", "r2", Quiet(), poll_s=0.01, appear_timeout_s=5, notes_every=3)
    assert "backstop stopped the group" in err.value.message


def test_past_max_run_hours_without_final_status_stops_following(gcs_env):
    from trainer.runfiles.status_file import RunStatus, write_status

    bucket = open_bucket("gs://test-bucket/follow4")
    write_status(bucket, RunStatus(run_id="20260101-000000-ab12", lang="fr", env="dev", state="RUNNING"))
    with pytest.raises(InfraError) as err:
        follow(
            bucket,
            "fr",
            "20260101-000000-ab12",
            Quiet(),
            poll_s=0.01,
            give_up_at=give_up_time("20260101-000000-ab12", max_run_hours=4),
        )
    assert "past max_run_hours" in err.value.message


def test_a_starting_run_is_live_until_its_status_may_appear(gcs_env):
    from trainer.runfiles.run_ids import new_run_id

    bucket = open_bucket("gs://test-bucket/follow5")
    fresh = new_run_id()
    assert live_state(bucket, "fr", fresh, GCP_APPEAR_S) == "STARTING"  # a booting VM must not be torn down
    assert live_state(bucket, "fr", "20260101-000000-ab12", GCP_APPEAR_S) is None  # long gone without a status
    bucket.write_bytes(f"fr/runs/{fresh}/vm/x-startup-error.txt", b"docker pull failed")
    assert live_state(bucket, "fr", fresh, GCP_APPEAR_S) is None


def test_a_queued_flex_start_request_has_the_queues_limit_and_an_error_after_it_the_errors(tmp_path):
    """At rung flex_start the group's list holds a queued resize request (ACCEPTED) for as long as the queue may
    take: no move within creation_error_minutes. The request then FAILED on a quota: an error, so the run moves
    creation_error_minutes after that error came (not at once, not after flex_start_wait_minutes), its wait the
    whole window's."""
    from stacks.errors import VmCreationError
    from stacks.targets.gcp.group_errors import FLEX_START_QUEUED, GroupError, Problem

    queued = Problem(GroupError("europe-west4-b", FLEX_START_QUEUED, "flex-start request queued since 10:00 UTC"), "")
    quota = Problem(
        GroupError("europe-west4-b", "QUOTA_EXCEEDED", "Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded."), "another zone"
    )
    asked = []

    def errors():
        asked.append(1)
        return [queued] if len(asked) <= 30 else [quota]

    bucket = open_bucket(f"file://{tmp_path}")
    with pytest.raises(VmCreationError) as err:
        follow(
            bucket,
            "fr",
            "r5",
            Quiet(),
            poll_s=0.01,
            appear_timeout_s=3600,
            notes_every=1,
            creation_errors=errors,
            creation_error_limit_s=0.05,
            queued_limit_s=3600,
            vm_running=lambda: False,
        )
    assert len(asked) > 31 and "QUOTA_EXCEEDED" in err.value.last and err.value.movable
    assert err.value.minutes * 60 >= 0.3 + 0.05  # 30 polls queued, then the error's own limit
    assert err.value.kinds == {"capacity", "quota"}
