"""What a bucket call does when Cloud Storage misbehaves: the policy in trainer/storage, against the
emulator behind a fault-injecting proxy (tests/support/gcs_proxy.py)."""

from __future__ import annotations

import pytest

from trainer.storage import GcsBucket, StorageError, StoragePolicy, on_retry

# Short waits, and a request timeout no busy machine reaches by itself (the stall test sets its own).
FAST = StoragePolicy(deadline_s=20, timeout_s=10.0, backoff_s=0.05, max_backoff_s=0.2)


@pytest.fixture
def notes():
    seen: list[str] = []
    remove = on_retry(seen.append)
    yield seen
    remove()


def bucket(tmp_path, policy: StoragePolicy = FAST) -> GcsBucket:
    return GcsBucket("test-bucket", f"f-{tmp_path.name}", policy=policy)


def test_three_503s_on_an_upload_are_retried_each_said_once(gcs_env, gcs_proxy, tmp_path, notes):
    b = bucket(tmp_path)
    src = tmp_path / "model.pth"
    src.write_bytes(b"weights" * 1000)
    gcs_proxy.add("status", r"^POST /upload/.*", times=3, status=503)
    b.upload(src, "fr/runs/r/model.pth")
    assert b.read_bytes("fr/runs/r/model.pth") == src.read_bytes()
    assert len(notes) == 3 and all("503" in n and "model.pth" in n and "retry" in n for n in notes)


@pytest.mark.parametrize("status", [429, 500, 502, 504])
def test_other_transient_answers_are_retried(gcs_env, gcs_proxy, tmp_path, notes, status):
    b = bucket(tmp_path)
    b.write_bytes("fr/runs/r/status.json", b"{}")
    gcs_proxy.add("status", r"^GET .*status\.json", times=2, status=status)
    assert b.read_bytes("fr/runs/r/status.json") == b"{}"
    assert len(notes) == 2


def test_a_permanent_error_is_not_retried_and_names_the_role(gcs_env, gcs_proxy, tmp_path, notes):
    b = bucket(tmp_path)
    gcs_proxy.add("status", r"^POST /upload/", times=5, status=403)
    with pytest.raises(StorageError, match=r"permission denied.*roles/storage.objectAdmin") as err:
        b.write_bytes("fr/runs/r/metrics.json", b"{}")
    assert not err.value.transient and notes == []
    assert gcs_proxy.faults[0].hits == 1  # asked once


def test_a_stalled_answer_times_out_and_is_retried(gcs_env, gcs_proxy, tmp_path, notes):
    b = bucket(tmp_path, StoragePolicy(deadline_s=30, timeout_s=1.0, backoff_s=0.05, max_backoff_s=0.2))
    b.write_bytes("fr/data/train.csv", b"text,labels\n")
    gcs_proxy.add("stall", r"^GET .*train\.csv", times=1, seconds=4.0)  # past the 1 s timeout
    assert b.read_bytes("fr/data/train.csv") == b"text,labels\n"
    assert notes and "Timeout" in notes[0]


def test_an_answer_cut_mid_body_is_read_again_whole(gcs_env, gcs_proxy, tmp_path, notes):
    b = bucket(tmp_path)
    data = bytes(range(256)) * 400
    b.write_bytes("fr/runs/r/checkpoints/000001-classifier.ckpt.pt", data)
    gcs_proxy.add("cut", r"^GET .*000001-classifier", times=1)
    assert b.read_bytes("fr/runs/r/checkpoints/000001-classifier.ckpt.pt") == data
    assert len(notes) == 1


def test_when_retries_run_out_the_error_is_transient_and_says_so(gcs_env, gcs_proxy, tmp_path, notes):
    b = bucket(tmp_path, StoragePolicy(deadline_s=2.0, timeout_s=10.0, backoff_s=0.1, max_backoff_s=0.2))
    gcs_proxy.add("status", r"^POST /upload/", times=1000, status=503)
    with pytest.raises(StorageError, match=r"gave up after \d+ s of retries \(503") as err:
        b.write_bytes("fr/runs/r/status.json", b"{}")
    assert err.value.transient and len(notes) >= 2


def test_create_if_absent_whose_answer_was_lost_is_still_ours(gcs_env, gcs_proxy, tmp_path, notes):
    """The first try lands but its answer is cut; the retry meets 412 from our own object: that is success."""
    b = bucket(tmp_path)
    gcs_proxy.add("cut", r"^POST /upload/", times=1)
    assert b.write_bytes("fr/models/CURRENT", b'{"run": "a"}', if_absent=True)
    assert len(notes) == 1
    assert not b.write_bytes("fr/models/CURRENT", b'{"run": "b"}', if_absent=True)  # someone else's: refused
    assert b.read_bytes("fr/models/CURRENT") == b'{"run": "a"}'


def test_a_large_upload_resumes_after_the_chunk_that_failed(gcs_env, gcs_proxy, tmp_path, notes):
    b = bucket(tmp_path, StoragePolicy(deadline_s=20, timeout_s=5.0, backoff_s=0.05, max_backoff_s=0.2, chunk_mib=1))
    src = tmp_path / "model.pth"
    src.write_bytes(bytes(range(256)) * (9 * 4096 + 7))  # 9 MiB + 1,792 bytes: above the one-request limit
    gcs_proxy.add("status", r"^PUT /upload/.*upload_id", times=1, status=503)
    gcs_proxy.requests.clear()
    b.upload(src, "fr/runs/r/model.pth")
    assert b.read_bytes("fr/runs/r/model.pth") == src.read_bytes()
    sent = gcs_proxy.bytes_written(r"/upload/")
    assert len(notes) == 1 and src.stat().st_size <= sent < src.stat().st_size + 2 * 1024 * 1024


def test_the_policy_reads_its_settings_and_refuses_nonsense():
    policy = StoragePolicy.from_env({"TRAINSTACK_STORAGE_DEADLINE_S": "30", "TRAINSTACK_STORAGE_TIMEOUT_S": "2.5"})
    assert (policy.deadline_s, policy.timeout_s, policy.backoff_s) == (30.0, 2.5, 1.0)
    with pytest.raises(ValueError, match="TRAINSTACK_STORAGE_TIMEOUT_S='0' must be above 0"):
        StoragePolicy.from_env({"TRAINSTACK_STORAGE_TIMEOUT_S": "0"})


@pytest.mark.parametrize("how", ["tmpfs", "injected"])
def test_a_full_disk_names_the_path_and_the_space_and_keeps_the_old_object(tmp_path, monkeypatch, how):
    """A size-limited tmpfs where the machine allows (else ENOSPC injected where the disk would raise it)."""
    from tests.support.disk import small_disk
    from trainer.storage import LocalBucket

    with small_disk(tmp_path / "disk", 256 * 1024, monkeypatch, how=how) as kind:
        b = LocalBucket(tmp_path / "disk")
        b.write_bytes("fr/runs/r/checkpoints/000001-classifier.ckpt.pt", b"x" * 1000)
        b.append("fr/runs/r/log.txt", b"before\n")
        with pytest.raises(StorageError, match="no space left"):  # a quarter MiB fits, then the disk is full
            b.append("fr/runs/r/log.txt", b"z" * (1024 * 1024))
        assert (tmp_path / "disk/fr/runs/r/log.txt").read_bytes() == b"before\n"  # no half append left behind
        with pytest.raises(
            StorageError, match=r"no space left on the device \(1,048,576 bytes needed, [\d,]+ free"
        ) as err:
            b.write_bytes("fr/runs/r/checkpoints/000001-classifier.ckpt.pt", b"y" * (1024 * 1024))
        assert "000001-classifier.ckpt.pt" in err.value.uri, kind
        assert b.read_bytes("fr/runs/r/checkpoints/000001-classifier.ckpt.pt") == b"x" * 1000  # intact
        assert b.list("fr/runs/r/") == ["fr/runs/r/checkpoints/000001-classifier.ckpt.pt", "fr/runs/r/log.txt"]
        assert not [p for p in (tmp_path / "disk/fr/runs/r/checkpoints").iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("how", ["tmpfs", "injected"])
def test_a_download_onto_a_full_disk_leaves_no_partial_file(gcs_env, tmp_path, monkeypatch, how):
    from tests.support.disk import small_disk

    b = bucket(tmp_path)
    b.write_bytes("fr/data/corpus/big.txt", b"w" * (512 * 1024))
    with small_disk(tmp_path / "disk", 128 * 1024, monkeypatch, how=how):
        with pytest.raises(StorageError, match="no space left"):
            b.download("fr/data/corpus/big.txt", tmp_path / "disk" / "big.txt")
        assert list((tmp_path / "disk").iterdir()) == []


@pytest.mark.parametrize("scheme", ["file", "gs"])
def test_mark_failed_never_replaces_a_success_written_meanwhile(tmp_path, request, scheme):
    """The supervisor (or VM agent) gives up on a run just as the trainer writes SUCCEEDED."""
    from trainer.runfiles.status_file import (
        FAILED,
        RUNNING,
        SUCCEEDED,
        RunStatus,
        mark_failed,
        read_status,
        write_status,
    )
    from trainer.storage import open_bucket

    if scheme == "gs":
        request.getfixturevalue("gcs_env")
    b = open_bucket(f"file://{tmp_path}/b" if scheme == "file" else f"gs://test-bucket/m-{tmp_path.name}")
    write_status(b, RunStatus(run_id="r", lang="fr", env="local", state=RUNNING))
    real_read = b.read_versioned
    raced = []

    def read_then_trainer_finishes(key):
        found = real_read(key)
        if not raced:
            raced.append(True)
            write_status(b, RunStatus(run_id="r", lang="fr", env="local", state=SUCCEEDED))
        return found

    b.read_versioned = read_then_trainer_finishes
    assert mark_failed(b, "fr", "r", "local", "supervisor: trainer exited").state == SUCCEEDED
    assert read_status(b, "fr", "r").state == SUCCEEDED
    assert mark_failed(b, "fr", "s", "local", "never started").state == FAILED  # no status yet: created


def test_retry_notes_reach_the_run_log_and_a_failed_flush_loses_no_line(tmp_path):
    from trainer.runfiles.status_file import RunStatus
    from trainer.runtime.runlog import RunLog
    from trainer.storage import LocalBucket
    from trainer.storage.policy import report_retry

    class Flaky(LocalBucket):
        calls = 0

        def append(self, key, data):
            Flaky.calls += 1
            if Flaky.calls == 1:
                report_retry("storage: append log.txt: 503 Service Unavailable; retry 1")  # during the call
            if Flaky.calls == 2:
                raise StorageError("append gave up after 4 s of retries (503)", key, transient=True)
            super().append(key, data)

    b = Flaky(tmp_path / "b")
    log = RunLog(b, RunStatus(run_id="r", lang="fr", env="local"), flush_every_s=1e9)
    remove = on_retry(log.note)
    try:
        log.line("one")
        log.flush()  # writes "one"; the retry note arrives during it
        log.line("two")
        log.flush()  # gives up: "two" and the note wait
        log.line("three")
        log.close()
    finally:
        remove()
    lines = [ln.split(" ", 1)[1] for ln in b.read_appended("fr/runs/r/log.txt")[0].decode().splitlines()]
    assert lines == ["one", "storage: append log.txt: 503 Service Unavailable; retry 1", "two", "three"]


def test_a_log_written_whole_before_pieces_keeps_its_lines(gcs_env, tmp_path):
    """A run started before pieces and resumed after: its earlier lines come first, and the seal keeps them."""
    b = bucket(tmp_path)
    b.write_bytes("fr/runs/r/log.txt", b"old 1\nold 2\n")
    b.append("fr/runs/r/log.txt", b"new 1\n")
    assert b.read_appended("fr/runs/r/log.txt")[0] == b"old 1\nold 2\nnew 1\n"
    b.seal_appended("fr/runs/r/log.txt")
    assert b.read_bytes("fr/runs/r/log.txt") == b"old 1\nold 2\nnew 1\n"


def test_a_final_status_is_tried_again_and_a_success_is_never_recorded_as_failure(tmp_path):
    from types import SimpleNamespace

    from trainer.runfiles.status_file import RunStatus, read_status
    from trainer.runtime.runlog import RunLog
    from trainer.storage import LocalBucket

    class Flaky(LocalBucket):
        policy = SimpleNamespace(backoff_s=0.001)
        failures = 2

        def write_bytes(self, key, data, **kw):
            if key.endswith("status.json") and b"SUCCEEDED" in data and Flaky.failures:
                Flaky.failures -= 1
                raise StorageError("write gave up after 300 s of retries (503)", key, transient=True)
            return super().write_bytes(key, data, **kw)

    b = Flaky(tmp_path / "b")
    log = RunLog(b, RunStatus(run_id="r", lang="fr", env="local"))
    log.started()
    log.succeeded()
    assert read_status(b, "fr", "r").state == "SUCCEEDED" and Flaky.failures == 0


def test_a_log_line_cut_by_a_full_disk_is_taken_back(tmp_path, monkeypatch):
    """A short append that fits half (injected: a tmpfs fills a page at a time, not at a byte)."""
    from tests.support.disk import small_disk
    from trainer.storage import LocalBucket

    with small_disk(tmp_path / "disk", 7 + 10, monkeypatch, how="injected"):
        b = LocalBucket(tmp_path / "disk")
        b.append("fr/runs/r/log.txt", b"before\n")
        with pytest.raises(StorageError, match="no space left"):
            b.append("fr/runs/r/log.txt", b"0123456789 and the rest of the line\n")
    b.append("fr/runs/r/log.txt", b"after\n")  # the disk has room again: the retried lines land whole
    assert (tmp_path / "disk/fr/runs/r/log.txt").read_bytes() == b"before\nafter\n"
