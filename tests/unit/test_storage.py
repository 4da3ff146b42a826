"""The same contract for file:// folders and gs:// buckets (real emulator server)."""

from __future__ import annotations

import pytest

from trainer.storage import LocalBucket, StorageError, open_bucket


@pytest.fixture(params=["file", "gs"])
def bucket(request, tmp_path):
    if request.param == "file":
        return open_bucket(f"file://{tmp_path / 'bucket'}")
    request.getfixturevalue("gcs_env")
    return open_bucket(f"gs://test-bucket/t-{tmp_path.name}")


def test_write_read_list_exists(bucket, tmp_path):
    assert not bucket.exists("fr/data/train.csv")
    bucket.write_bytes("fr/data/train.csv", b"text,labels\n")
    bucket.write_bytes("fr/data/corpus/a.txt", "é\n".encode())
    assert bucket.exists("fr/data/train.csv")
    assert bucket.read_bytes("fr/data/corpus/a.txt").decode() == "é\n"
    assert bucket.list("fr/data/") == ["fr/data/corpus/a.txt", "fr/data/train.csv"]
    assert bucket.list("en/") == []
    src = tmp_path / "up.bin"
    src.write_bytes(b"\x00\x01")
    bucket.upload(src, "fr/runs/r/model.pth")
    bucket.download("fr/runs/r/model.pth", tmp_path / "down.bin")
    assert (tmp_path / "down.bin").read_bytes() == b"\x00\x01"


def test_if_absent_never_overwrites(bucket):
    assert bucket.write_bytes("fr/lm/meta.json", b"first", if_absent=True)
    assert not bucket.write_bytes("fr/lm/meta.json", b"second", if_absent=True)
    assert bucket.read_bytes("fr/lm/meta.json") == b"first"


def test_missing_object_is_a_storage_error(bucket):
    with pytest.raises(StorageError, match="no such object"):
        bucket.read_bytes("nope.txt")


def test_local_bucket_refuses_keys_outside_it(tmp_path):
    bucket = LocalBucket(tmp_path / "b")
    with pytest.raises(StorageError, match="escapes"):
        bucket.write_bytes("../outside.txt", b"x")


def test_relative_file_uri_and_bad_scheme(tmp_path):
    assert open_bucket("file://rel/b", base_dir=tmp_path).root == (tmp_path / "rel" / "b").resolve()
    with pytest.raises(StorageError, match="unsupported"):
        open_bucket("s3://x")


def test_open_read_streams_and_delete_removes(bucket):
    bucket.write_bytes("fr/data/corpus/big.txt", b"line 1\nline 2\n")
    with bucket.open_read("fr/data/corpus/big.txt") as fh:
        assert [ln for ln in fh] == [b"line 1\n", b"line 2\n"]
    bucket.delete("fr/data/corpus/big.txt")
    bucket.delete("fr/data/corpus/big.txt")  # deleting what is gone is not an error
    assert not bucket.exists("fr/data/corpus/big.txt")
    with pytest.raises(StorageError, match="no such object"):
        bucket.open_read("fr/data/corpus/big.txt")


def test_folders_tail_reads_and_appends(bucket):
    """What run listings, log tails and the run log need, the same on every bucket."""
    bucket.write_bytes("fr/runs/r1/status.json", b"{}")
    bucket.write_bytes("fr/runs/r2/log.txt", b"x")
    bucket.write_bytes("en/data/train.csv", b"t")
    assert bucket.folders("") == ["en", "fr"] and bucket.folders("fr/runs/") == ["r1", "r2"]
    assert bucket.folders("de/runs/") == []
    data, cursor = bucket.read_appended("fr/runs/r1/nothing.txt")
    assert data == b"" and bucket.read_appended("fr/runs/r1/nothing.txt", cursor)[0] == b""
    bucket.append("fr/runs/r1/log.txt", b"one\n")
    bucket.append("fr/runs/r1/log.txt", b"two\n")
    data, cursor = bucket.read_appended("fr/runs/r1/log.txt")
    assert data == b"one\ntwo\n"
    assert bucket.read_appended("fr/runs/r1/log.txt", cursor)[0] == b""
    bucket.append("fr/runs/r1/log.txt", b"three\n")
    assert bucket.read_appended("fr/runs/r1/log.txt", cursor)[0] == b"three\n"
    assert bucket.folders("fr/runs/") == ["r1", "r2"]  # the log's pieces are not a folder of runs


def test_versioned_write_never_replaces_a_newer_object(bucket):
    """What mark_failed needs: a write conditional on the version read, refused once someone else wrote."""
    assert bucket.read_versioned("fr/runs/r1/status.json") is None
    bucket.write_bytes("fr/runs/r1/status.json", b"RUNNING")
    data, version = bucket.read_versioned("fr/runs/r1/status.json")
    assert data == b"RUNNING"
    bucket.write_bytes("fr/runs/r1/status.json", b"SUCCEEDED")  # the trainer, in between
    assert not bucket.write_bytes("fr/runs/r1/status.json", b"FAILED", if_version=version)
    assert bucket.read_bytes("fr/runs/r1/status.json") == b"SUCCEEDED"
    data, version = bucket.read_versioned("fr/runs/r1/status.json")
    assert bucket.write_bytes("fr/runs/r1/status.json", b"FAILED", if_version=version)
    assert bucket.read_bytes("fr/runs/r1/status.json") == b"FAILED"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_local_bucket_files_follow_the_umask(tmp_path, umask, mode):
    """Files a run writes are as readable as any file the user creates (mkstemp alone makes 0600)."""
    import os
    import stat

    old = os.umask(umask)
    try:
        bucket = open_bucket(f"file://{tmp_path}")
        bucket.write_bytes("fr/runs/r1/report.html", b"<html></html>")
        assert bucket.write_bytes("fr/models/CURRENT", b"{}", if_absent=True)
    finally:
        os.umask(old)
    for key in ("fr/runs/r1/report.html", "fr/models/CURRENT"):
        assert stat.S_IMODE((tmp_path / key).stat().st_mode) == mode


def test_check_access_of_a_folder_that_cannot_hold_a_bucket(tmp_path):
    (tmp_path / "plain-file").write_text("x")
    with pytest.raises(StorageError, match="not a writable folder") as err:
        LocalBucket(tmp_path / "plain-file" / "bucket").check_access("fr/")
    assert err.value.bad_input
    LocalBucket(tmp_path / "new" / "bucket").check_access("fr/")  # created on the first write: fine


def test_two_writers_appends_keep_every_line_in_order_and_seal_whole(bucket):
    """The supervisor and the trainer both append to the run log: no line lost, none rewritten."""
    other = open_bucket(bucket.uri)  # a second writer (its own client)
    key = "fr/runs/r1/log.txt"
    for i in range(6):
        (bucket if i % 2 else other).append(key, f"line {i}\n".encode())
    data, cursor = bucket.read_appended(key)
    assert data.decode().splitlines() == [f"line {i}" for i in range(6)]
    bucket.seal_appended(key)
    assert bucket.read_bytes(key) == data  # DESIGN's <run>/log.txt: the whole log once the writer ends
    assert bucket.read_appended(key, cursor)[0] == b""  # a follower reads nothing twice


def test_a_follower_of_a_log_written_whole_reads_only_what_is_appended_after(bucket):
    """A log written whole (from before pieces, or sealed) then appended to again (a resumed run): what the reader
    had read is not read again when the first append copies it into the pieces."""
    key = "fr/runs/r1/log.txt"
    bucket.write_bytes(key, b"one\ntwo\n")
    data, cursor = bucket.read_appended(key)
    assert data == b"one\ntwo\n"
    bucket.append(key, b"three\n")
    assert bucket.read_appended(key, cursor)[0] == b"three\n"
    assert bucket.read_appended(key)[0] == b"one\ntwo\nthree\n"


def test_a_scheme_of_a_target_outside_the_tree_opens_through_the_opener_its_registry_line_names(monkeypatch, tmp_path):
    from tests.support.plugin_target import PLUGINS
    from trainer.storage import OPENERS_ENV, StorageError, open_bucket

    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv(OPENERS_ENV, "other=nowhere.at_all:f,shelf=shelftarget.storage:open_shelf")
    shelf = open_bucket(f"shelf://{tmp_path}")
    shelf.write_bytes("fr/x.txt", b"1")
    assert (tmp_path / "fr" / "x.txt").read_bytes() == b"1" and shelf.url("fr/x.txt") == f"shelf://{tmp_path}/fr/x.txt"
    with pytest.raises(StorageError, match=f"{OPENERS_ENV} names nowhere.at_all:f for other://"):
        open_bucket("other://b")
    monkeypatch.delenv(OPENERS_ENV)
    with pytest.raises(StorageError, match="unsupported bucket scheme"):
        open_bucket(f"shelf://{tmp_path}")
