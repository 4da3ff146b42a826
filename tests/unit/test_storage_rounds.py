"""The writes a run must not lose (an artifact, its final status): made again whole by the storage policy
(trainer.storage.must_land) when a call gave up on a transient failure, and by nothing else."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainer.runfiles.keys import KEPT_MARK
from trainer.runfiles.status_file import FAILED, RunStatus, read_status
from trainer.runtime import distributed as D
from trainer.runtime.context import RunContext
from trainer.runtime.runlog import RunLog
from trainer.storage import LocalBucket, StorageError, StoragePolicy, must_land
from trainer.storage import policy as storage_policy


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The policy's waits between rounds, recorded instead of slept."""
    seen: list[float] = []
    monkeypatch.setattr(storage_policy.time, "sleep", seen.append)
    return seen


def failing(times: int, *, transient: bool = True):
    """A call that gives up `times` times, then returns "done"; its calls counted."""
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= times:
            raise StorageError(f"write gave up ({len(calls)})", "gs://b/k", transient=transient)
        return "done"

    return call, calls


def test_a_transient_failure_is_tried_again_each_wait_longer_and_said(waits):
    call, calls = failing(2)
    said: list[str] = []
    bucket = SimpleNamespace(policy=StoragePolicy(backoff_s=0.5))
    assert must_land(call, bucket, what="upload of model.pth", say=said.append) == "done"
    assert len(calls) == 3 and waits == [5.0, 10.0]
    assert said == [
        "upload of model.pth failed (write gave up (1)); trying again in 5 s (round 2 of 3)",
        "upload of model.pth failed (write gave up (2)); trying again in 10 s (round 3 of 3)",
    ]


def test_the_last_rounds_failure_is_raised_after_the_policys_rounds(waits):
    call, calls = failing(9)
    bucket = SimpleNamespace(policy=StoragePolicy(backoff_s=0.001, rounds=5))
    with pytest.raises(StorageError, match=r"\(5\)"):
        must_land(call, bucket, what="x", say=lambda _: None)
    assert len(calls) == 5 and len(waits) == 4


def test_a_permanent_failure_is_raised_at_once(waits):
    call, calls = failing(1, transient=False)
    said = []
    with pytest.raises(StorageError):
        must_land(call, SimpleNamespace(policy=StoragePolicy()), what="x", say=said.append)
    assert len(calls) == 1 and waits == [] and said == []


def test_a_folder_bucket_has_the_default_policy_and_the_rounds_are_a_setting(tmp_path, waits):
    call, calls = failing(5)
    with pytest.raises(StorageError):
        must_land(call, LocalBucket(tmp_path), what="x", say=lambda _: None)
    assert len(calls) == StoragePolicy().rounds == 3 and waits == [10.0, 20.0]
    assert StoragePolicy.from_env({"TRAINSTACK_STORAGE_ROUNDS": "5"}).rounds == 5
    with pytest.raises(ValueError, match="must be above 0"):
        StoragePolicy.from_env({"TRAINSTACK_STORAGE_ROUNDS": "0"})


class FlakyFolder(LocalBucket):
    """A folder whose writes of one key give up (transiently) `failures` times."""

    policy = StoragePolicy(backoff_s=0.001)

    def __init__(self, root, key_end: str, failures: int):
        super().__init__(root)
        self.key_end, self.failures, self.tries = key_end, failures, 0

    def write_bytes(self, key, data, **kw):
        if key.endswith(self.key_end):
            self.tries += 1
            if self.tries <= self.failures:
                raise StorageError("write gave up after 300 s of retries (503)", key, transient=True)
        return super().write_bytes(key, data, **kw)


def context(tmp_path, bucket) -> tuple[RunContext, list[str]]:
    lines: list[str] = []
    work = tmp_path / "work"
    work.mkdir()
    rc = RunContext(
        a=SimpleNamespace(lang="fr", run_id="r1"),
        bucket=bucket,
        log=SimpleNamespace(line=lines.append),
        ctx=D.Context(),
        preemption=None,
        work=work,
        scratch=None,
        store=None,
        precision="fp32",
    )
    return rc, lines


def test_an_artifact_lands_after_failed_rounds_the_waits_in_the_run_log(tmp_path):
    bucket = FlakyFolder(tmp_path / "b", "metrics.json", failures=2)
    rc, lines = context(tmp_path, bucket)
    rc.put(b"{}", "metrics.json")
    assert bucket.read_bytes("fr/runs/r1/metrics.json") == b"{}" and bucket.tries == 3
    assert [ln.split(";")[0] for ln in lines] == [
        "upload of metrics.json failed (write gave up after 300 s of retries (503))"
    ] * 2
    assert not (rc.work / KEPT_MARK).exists()


def test_an_artifact_that_never_lands_is_kept_in_the_work_folder_and_the_error_says_where(tmp_path):
    bucket = FlakyFolder(tmp_path / "b", "model.pth", failures=99)
    rc, _ = context(tmp_path, bucket)
    with pytest.raises(StorageError, match=f"model.pth not uploaded .*kept in {rc.work}"):
        rc.put(b"weights", "model.pth")
    assert bucket.tries == 3
    assert (rc.work / "model.pth").read_bytes() == b"weights"
    assert (rc.work / KEPT_MARK).read_text().startswith("model.pth: write gave up")


def test_an_optional_file_that_never_lands_fails_alone_keeping_nothing(tmp_path):
    bucket = FlakyFolder(tmp_path / "b", "report.html", failures=99)
    rc, _ = context(tmp_path, bucket)
    with pytest.raises(StorageError, match="write gave up"):
        rc.put(b"<html>", "report.html", optional=True)
    assert bucket.tries == 3 and not (rc.work / KEPT_MARK).exists() and not (rc.work / "report.html").exists()


def test_a_progress_write_is_not_tried_again_a_final_status_is(tmp_path, capsys):
    bucket = FlakyFolder(tmp_path / "b", "status.json", failures=1)
    log = RunLog(bucket, RunStatus(run_id="r1", lang="fr", env="local"))
    log.update(stage="classifier", epoch=1)  # mid-run: the next update writes it
    assert bucket.tries == 1 and read_status(bucket, "fr", "r1") is None
    assert "the next update writes it" in capsys.readouterr().out
    bucket.failures = 3  # two more failures for the final status: it lands on its last round
    log.failed("boom")
    assert bucket.tries == 4 and read_status(bucket, "fr", "r1").state == FAILED
    assert capsys.readouterr().out.count("status.json (FAILED) failed") == 2
