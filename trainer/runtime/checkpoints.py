"""Exact-resume checkpoints: one object per save, a pointer written last, the newest K kept.

    <run>/checkpoints/000007-classifier.ckpt.pt   model, optimizer, position, RNG states of
                                                 every rank, epoch history, data hash, world size
    <run>/checkpoints/LATEST.ckpt.json            {"key", "seq", "position", "saved_at", "size", "sha256",
                                                  "previous": [the same for each older one kept]}

A reader trusts only the objects the pointer names, so a process killed between the two
uploads resumes from the previous complete checkpoint; one whose bytes do not match the size
and checksum recorded (cut short, corrupted) is passed over for the one before, saying so.
Names end in `.ckpt.*` so the bucket's lifecycle rule can expire them.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from trainer.errors import DataError
from trainer.runfiles.keys import CHECKPOINT_POINTER, run_key
from trainer.storage import Bucket, StorageError

POINTER = CHECKPOINT_POINTER
FORMAT = 2


class Damaged(Exception):
    """A checkpoint object is missing, cut short or corrupt."""


@dataclass(frozen=True)
class Position:
    """Where a stage stands: `epoch` epochs of phase `phase` done, plus `batch` batches of the next."""

    stage: str
    phase: int = 0
    epoch: int = 0
    batch: int = 0
    done: bool = False  # the whole stage is finished

    def describe(self) -> str:
        if self.done:
            return f"{self.stage} finished"
        return f"{self.stage} phase {self.phase + 1}, epoch {self.epoch + 1}" + (
            f", batch {self.batch}" if self.batch else ""
        )


def rng_state() -> dict:
    """Every random stream a training step draws from, on this process."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class Checkpoint:
    """A loaded checkpoint (see the module docstring for what `payload` holds)."""

    position: Position
    payload: dict

    def check_compatible(self, *, data_hash: str, labels: list[str]) -> None:
        """A resume must see the data the run started with; anything else would mix two runs."""
        p = self.payload
        if p.get("data_hash") != data_hash:
            raise DataError(
                f"the data changed since this run was checkpointed (data hash {p.get('data_hash')} -> {data_hash})",
                hint="train.csv or the corpus was replaced while the run was interrupted; start a new run "
                "(trainctl destroy, then trainctl train) to train on the new data",
            )
        if p.get("labels") != labels:
            raise DataError(
                f"the label set changed since this run was checkpointed ({p.get('labels')} -> {labels})",
                hint="start a new run to train on the new labels",
            )


class CheckpointStore:
    """Saves and finds the run's checkpoints (rank 0 only writes)."""

    def __init__(self, bucket: Bucket, lang: str, run_id: str, work: Path, *, keep: int = 3):
        self.bucket, self.lang, self.run_id, self.work, self.keep = bucket, lang, run_id, work, max(1, keep)

    def _key(self, name: str) -> str:
        return run_key(self.lang, self.run_id, name)

    def _pointer(self) -> dict | None:
        key = self._key(POINTER)
        return json.loads(self.bucket.read_bytes(key)) if self.bucket.exists(key) else None

    def save(self, position: Position, payload: dict) -> str:
        """Uploads one checkpoint object, then the pointer (size and checksum of each kept); prunes all but the
        newest `keep`. A StorageError leaves the previous checkpoints and pointer as they were."""
        pointer = self._pointer()
        seq = (pointer["seq"] + 1) if pointer else 1
        name = f"checkpoints/{seq:06d}-{position.stage}.ckpt.pt"
        buf = io.BytesIO()
        torch.save({"format": FORMAT, "position": asdict(position), **payload}, buf)
        data = buf.getvalue()
        self.bucket.write_bytes(self._key(name), data)
        older = [{k: v for k, v in pointer.items() if k != "previous"}, *pointer.get("previous", [])] if pointer else []
        self.bucket.write_bytes(
            self._key(POINTER),
            json.dumps(
                {
                    "key": name,
                    "seq": seq,
                    "position": asdict(position),
                    "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "previous": older[: self.keep - 1],
                },
                indent=2,
            ).encode(),
        )
        for old in self.objects()[: -self.keep]:
            self.bucket.delete(self._key(old))
        return name

    def objects(self) -> list[str]:
        """Checkpoint object names (`checkpoints/...`), oldest first."""
        prefix = self._key("checkpoints/")
        return sorted(k[len(self._key("")) :] for k in self.bucket.list(prefix) if k.endswith(".ckpt.pt"))

    def _load(self, entry: dict) -> dict:
        """The payload of one pointer entry; Damaged says why it cannot be trusted."""
        try:
            raw = self.bucket.read_bytes(self._key(entry["key"]))
        except StorageError as exc:
            if exc.transient or exc.bad_input:
                raise  # storage is down, or a role is missing: a resume must not start over because of it
            raise Damaged("missing") from exc
        if "size" in entry and len(raw) != entry["size"]:
            raise Damaged(f"{len(raw):,} bytes where {entry['size']:,} were written (cut short)")
        if "sha256" in entry and hashlib.sha256(raw).hexdigest() != entry["sha256"]:
            raise Damaged("not the bytes that were written (checksum differs)")
        try:
            payload = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
        except Exception as exc:  # a checkpoint from before checksums, torn: unreadable whatever the cause
            raise Damaged(f"unreadable ({type(exc).__name__})") from exc
        if payload.get("format") != FORMAT:
            raise DataError(
                f"checkpoint {entry['key']} has format {payload.get('format')}, this trainer reads {FORMAT}",
                hint="resume it with the trainer version that wrote it, or start a new run",
            )
        return payload

    def latest(self, note: Callable[[str], None] = print) -> Checkpoint | None:
        """The newest checkpoint whose bytes are the ones written; older ones stand in for a damaged one."""
        pointer = self._pointer()
        if pointer is None:
            return None
        entries = [pointer, *pointer.get("previous", [])]
        for i, entry in enumerate(entries):
            try:
                payload = self._load(entry)
            except Damaged as exc:
                after = (
                    f"resuming from the one before, {entries[i + 1]['key']}"
                    if i + 1 < len(entries)
                    else "no older checkpoint is kept: the run starts over"
                )
                note(f"checkpoint: {entry['key']} is {exc}; {after}")
                continue
            return Checkpoint(Position(**payload.pop("position")), payload)
        return None
