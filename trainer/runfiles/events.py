"""TensorBoard scalars written with the standard library: what trainctl adds to a run's board once the run
has ended (its cost, its Spot time: curves.after_run_figures), so TensorBoard shows every figure MLflow's
mirror has. The operator's CLI has no tensorboard package, so the format is written here: TFRecord framing
(length, masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes) around `Event` protocol buffers
(wall_time, step, a Summary of `simple_value`s), the first event naming the file's version, as TensorBoard's
own writer does.
"""

from __future__ import annotations

import struct
import time

from trainer.runfiles.keys import run_key

BOARD = "tensorboard/"  # the run's TensorBoard folder (trainer.runtime.board uploads the trainer's files there)
# Sorts after the trainer's own event files (events.out.tfevents.<unix time>.<host>...), which TensorBoard reads
# in name order; one name, so a second record of the run's end replaces the first.
AFTER_RUN_EVENTS = "events.out.tfevents.9999999999.trainctl-after-run"


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(wall_time: float, *, step: int = 0, file_version: str | None = None, scalars: dict | None = None):
    message = b"\x09" + struct.pack("<d", wall_time)  # 1: wall_time (double)
    if step:
        message += b"\x10" + _varint(step)  # 2: step (int64)
    if file_version is not None:
        message += _field(3, file_version.encode())
    if scalars:  # 5: summary { repeated value { 1: tag, 2: simple_value (float) } }
        values = b"".join(
            _field(1, _field(1, tag.encode()) + b"\x15" + struct.pack("<f", value)) for tag, value in scalars.items()
        )
        message += _field(5, values)
    return message


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked(crc32c(length))) + data + struct.pack("<I", _masked(crc32c(data)))


def scalar_events(figures: dict[str, float], step: int, *, wall_time: float | None = None) -> bytes:
    """An event file's bytes: `figures` (tag -> value) at `step`."""
    at = time.time() if wall_time is None else wall_time
    return _record(_event(at, file_version="brain.Event:2")) + _record(_event(at, step=step, scalars=figures))


def after_run_key(lang: str, run_id: str) -> str:
    return run_key(lang, run_id, BOARD + AFTER_RUN_EVENTS)
