"""Following a gcp run through its bucket (GCS emulator): a VM that could not start the trainer."""
from __future__ import annotations

import pytest

from stacks.errors import InfraError
from stacks.lifecycle import follow
from trainer.storage import open_bucket


class Quiet:
    def info(self, message): pass
    def warn(self, message): pass
    def log_line(self, line): pass
    def progress(self, status): pass


def test_startup_error_note_ends_following_with_its_reason(gcs_env):
    bucket = open_bucket("gs://test-bucket/follow1")
    bucket.write_bytes("fr/runs/r9/vm/dev-train-fr-abcd-startup-error.txt",
                       b"2026-11-22T10:00:00Z dev-train-fr-abcd: docker pull failed 5 times\n")
    with pytest.raises(InfraError) as err:
        follow(bucket, "fr", "r9", Quiet(), poll_s=0.01, appear_timeout_s=5)
    assert "never started on its VM" in err.value.message and "docker pull failed 5 times" in err.value.message


def test_no_status_and_no_note_times_out(gcs_env):
    bucket = open_bucket("gs://test-bucket/follow2")
    with pytest.raises(InfraError) as err:
        follow(bucket, "fr", "r1", Quiet(), poll_s=0.05, appear_timeout_s=0.2)
    assert "wrote no status.json" in err.value.message
