"""Checkpoint objects and their pointer: a kill between two uploads never pairs mismatched state."""

from __future__ import annotations

import pytest
import torch

from trainer.errors import DataError
from trainer.runtime.checkpoints import CheckpointStore, Position
from trainer.storage import open_bucket


class KilledAtPointer(Exception):
    pass


def store(bucket, tmp_path, keep=3) -> CheckpointStore:
    return CheckpointStore(bucket, "fr", "r1", tmp_path / "work", keep=keep)


def payload(step: int) -> dict:
    return {"model": {"w": torch.full((2,), float(step))}, "data_hash": "h", "labels": ["a", "b"], "rng": []}


def test_kill_between_object_and_pointer_resumes_from_previous_complete(tmp_path):
    bucket = open_bucket(f"file://{tmp_path / 'b'}")
    s = store(bucket, tmp_path)
    s.save(Position("classifier", 1, 2, 0), payload(1))
    real_write = bucket.write_bytes

    def write_then_die(key, data, **kw):
        if key.endswith("LATEST.ckpt.json"):
            raise KilledAtPointer()  # SIGKILL after the object, before the pointer
        return real_write(key, data, **kw)

    bucket.write_bytes = write_then_die
    with pytest.raises(KilledAtPointer):
        s.save(Position("classifier", 1, 3, 5), payload(2))
    bucket.write_bytes = real_write
    latest = store(bucket, tmp_path).latest()
    assert latest.position == Position("classifier", 1, 2, 0)
    assert torch.equal(latest.payload["model"]["w"], torch.full((2,), 1.0))
    # The orphan object does not confuse the numbering: the next save goes on from the pointer.
    name = s.save(Position("classifier", 1, 3, 0), payload(3))
    assert name == "checkpoints/000002-classifier.ckpt.pt"
    assert store(bucket, tmp_path).latest().position.epoch == 3


def test_keeps_the_newest_k_and_refuses_other_data(tmp_path):
    bucket = open_bucket(f"file://{tmp_path / 'b'}")
    s = store(bucket, tmp_path, keep=2)
    assert s.latest() is None
    for step in range(1, 5):
        s.save(Position("lm_finetune", 0, step, 0), payload(step))
    assert s.objects() == ["checkpoints/000003-lm_finetune.ckpt.pt", "checkpoints/000004-lm_finetune.ckpt.pt"]
    latest = s.latest()
    latest.check_compatible(data_hash="h", labels=["a", "b"])
    with pytest.raises(DataError, match="data changed"):
        latest.check_compatible(data_hash="other", labels=["a", "b"])
    with pytest.raises(DataError, match="label set changed"):
        latest.check_compatible(data_hash="h", labels=["a", "c"])


@pytest.mark.parametrize("cut", [0, 1, 100, -1])
def test_a_truncated_newest_checkpoint_resumes_from_the_previous(tmp_path, cut):
    bucket = open_bucket(f"file://{tmp_path / 'b'}")
    s = store(bucket, tmp_path)
    s.save(Position("classifier", 0, 1, 0), payload(1))
    newest = s.save(Position("classifier", 0, 2, 0), payload(2))
    path = tmp_path / "b" / "fr/runs/r1" / newest
    data = path.read_bytes()
    path.write_bytes(data[:cut])  # torn at any byte (-1: all but the last)
    notes: list[str] = []
    latest = store(bucket, tmp_path).latest(note=notes.append)
    assert latest.position == Position("classifier", 0, 1, 0)
    assert torch.equal(latest.payload["model"]["w"], torch.full((2,), 1.0))
    assert len(notes) == 1 and "cut short" in notes[0] and "000001-classifier" in notes[0]


def test_a_corrupt_checkpoint_of_the_same_size_is_caught_by_its_checksum(tmp_path):
    bucket = open_bucket(f"file://{tmp_path / 'b'}")
    s = store(bucket, tmp_path)
    s.save(Position("classifier", 0, 1, 0), payload(1))
    newest = s.save(Position("classifier", 0, 2, 0), payload(2))
    path = tmp_path / "b" / "fr/runs/r1" / newest
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    notes: list[str] = []
    assert store(bucket, tmp_path).latest(note=notes.append).position.epoch == 1
    assert "checksum differs" in notes[0]
    path.unlink()  # and one that is gone altogether
    notes.clear()
    assert store(bucket, tmp_path).latest(note=notes.append).position.epoch == 1
    assert "is missing" in notes[0]


def test_nothing_usable_starts_over_saying_so(tmp_path):
    bucket = open_bucket(f"file://{tmp_path / 'b'}")
    s = store(bucket, tmp_path, keep=1)
    only = s.save(Position("classifier", 0, 1, 0), payload(1))
    (tmp_path / "b" / "fr/runs/r1" / only).write_bytes(b"")
    notes: list[str] = []
    assert store(bucket, tmp_path, keep=1).latest(note=notes.append) is None
    assert "the run starts over" in notes[0]


def test_a_failed_checkpoint_write_leaves_the_previous_one_current(tmp_path):
    from trainer.storage import StorageError

    bucket = open_bucket(f"file://{tmp_path / 'b'}")
    s = store(bucket, tmp_path)
    s.save(Position("classifier", 0, 1, 0), payload(1))
    real_write = bucket.write_bytes

    def disk_full(key, data, **kw):
        raise StorageError("no space left on the device (1,000 bytes needed, 0 free)", key)

    bucket.write_bytes = disk_full
    with pytest.raises(StorageError):
        s.save(Position("classifier", 0, 2, 0), payload(2))
    bucket.write_bytes = real_write
    assert store(bucket, tmp_path).latest().position.epoch == 1
    assert s.objects() == ["checkpoints/000001-classifier.ckpt.pt"]
