"""What `data push` needs of a bucket to stage a large file: an object's checksum without reading the object, and
an upload from disk a chunk at a time that says how far it has got; the same for file:// folders and gs://
buckets (the real emulator server). And ChecksummingReader, which digests a file as another reader reads it."""

from __future__ import annotations

import hashlib
import io
import tracemalloc

import google_crc32c
import pytest

from trainer.storage import GcsBucket, LocalBucket, StoragePolicy, open_bucket
from trainer.storage.checksums import Checksum, ChecksummingReader


@pytest.fixture(params=["file", "gs"])
def bucket(request, tmp_path):
    if request.param == "file":
        return open_bucket(f"file://{tmp_path / 'bucket'}")
    request.getfixturevalue("gcs_env")
    # 1 MiB chunks: a file above 8 MiB (the client's limit for a one-request upload) goes up in several
    return GcsBucket("test-bucket", f"c-{tmp_path.name}", policy=StoragePolicy(chunk_mib=1))


def digests(data: bytes) -> Checksum:
    return Checksum(hashlib.md5(data).hexdigest(), google_crc32c.Checksum(data).digest().hex())


def test_an_object_s_checksum_is_its_md5_and_crc32c_and_none_when_there_is_no_object(bucket):
    data = "texte,étiquette\n".encode() * 1000
    bucket.write_bytes("fr/data/train.csv", data)
    # the emulator keeps md5Hash as Cloud Storage does for an object uploaded whole (a composite has none:
    # tests/unit/test_data_push.py takes it away to show the crc32c fallback)
    assert bucket.checksum("fr/data/train.csv") == digests(data)
    assert bucket.checksum("fr/data/valid.csv") is None
    assert bucket.checksum("fr/data") is None  # a "folder" is no object


def test_a_gs_checksum_reads_the_metadata_and_downloads_nothing(gcs_env, gcs_proxy, tmp_path):
    bucket = open_bucket(f"gs://test-bucket/m-{tmp_path.name}")
    bucket.write_bytes("fr/data/train.csv", b"text,labels\n" * 5000)
    gcs_proxy.requests.clear()
    assert bucket.checksum("fr/data/train.csv").md5 == hashlib.md5(b"text,labels\n" * 5000).hexdigest()
    assert [s.method for s in gcs_proxy.requests] == ["GET"]
    assert "alt=media" not in gcs_proxy.requests[0].target


def test_an_upload_says_how_far_it_has_got_a_chunk_at_a_time(bucket, tmp_path):
    src = tmp_path / "train.csv"
    data = bytes(range(256)) * (9 * 4096 + 7)  # 9 MiB and a bit: above one request, several chunks
    src.write_bytes(data)
    sent: list[int] = []
    bucket.upload(src, "fr/data/train.csv", progress=sent.append)
    assert len(sent) > 2 and sent == sorted(sent) and sent[-1] == len(data)
    assert bucket.checksum("fr/data/train.csv") == digests(data)


def test_a_folder_bucket_uploads_a_large_file_without_holding_it(tmp_path):
    src = tmp_path / "train.csv"
    src.write_bytes(b"un texte,a\n" * 1_000_000)  # 11 MB
    bucket = LocalBucket(tmp_path / "bucket")
    tracemalloc.start()
    try:
        bucket.upload(src, "fr/data/train.csv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "bucket/fr/data/train.csv").read_bytes() == src.read_bytes()
    assert peak < 2_000_000, f"{peak:,} bytes held to copy an 11 MB file"


def test_a_checksumming_reader_digests_the_whole_file_however_it_was_read(tmp_path):
    data = bytes(range(256)) * 5000
    whole = digests(data)
    for reads in (
        [("read", -1)],
        [("read", 2), ("seek", 0), ("read", -1)],  # a gzip check's head, then all
        [("seek", len(data) - 8), ("read", 8), ("seek", 100), ("read", 50)],  # Parquet's footer first
        [("read", 1000)],
        [],
    ):
        with open(tmp_path / "f", "wb") as fh:
            fh.write(data)
        with open(tmp_path / "f", "rb") as fh:
            reader = ChecksummingReader(fh)
            stream = io.BufferedReader(reader, buffer_size=4096)
            for op, arg in reads:
                getattr(stream, op)(arg)
            stream.close()  # a reader that closes what it was given leaves the file to its owner
            assert not fh.closed
            assert reader.checksum() == whole, reads
            assert reader.checksum() == whole  # asked twice, the same


def test_checksums_compare_by_md5_else_crc32c_else_cannot_tell():
    a = Checksum(md5="aa", crc32c="01")
    assert a.same_as(Checksum(md5="aa", crc32c="ff")) is True  # md5 decides where both have it
    assert a.same_as(Checksum(md5="bb", crc32c="01")) is False
    assert a.same_as(Checksum(md5=None, crc32c="01")) is True  # a composite object: crc32c alone
    assert a.same_as(Checksum(md5=None, crc32c="02")) is False
    assert Checksum(md5="aa").same_as(Checksum(crc32c="01")) is None
