"""TensorBoard event files of a run: one folder per stage, uploaded to `<run>/tensorboard/<stage>/` as they
grow, so `tensorboard --logdir <bucket>/<lang>/runs` shows every run's curves while it trains.

Written with TensorBoard's own writer (torch.utils.tensorboard) into the work folder, then copied whole
whenever a file grew (the event files are small: a few scalars an epoch). Without the `tensorboard`
package the run says so once and trains on: the curves are a view, metrics.json is the record.
"""
from __future__ import annotations

import time
from pathlib import Path

from trainer.runfiles.status_file import run_key
from trainer.storage import Bucket, StorageError

FOLDER = "tensorboard"


class Board:
    """Rank 0's TensorBoard writers, one per stage."""

    def __init__(self, bucket: Bucket, lang: str, run_id: str, folder: Path, log, *, every_s: float = 5.0):
        self.bucket, self.lang, self.run_id, self.folder, self.log = bucket, lang, run_id, folder, log
        self.every_s, self._last_sync = every_s, 0.0
        self.writers: dict[str, object] = {}
        self.sent: dict[Path, int] = {}  # event file -> bytes uploaded
        try:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
        except ImportError:
            self.writer_class = None
            log.line("tensorboard is not installed: no TensorBoard curves for this run (metrics.json has the figures)")
        else:
            self.writer_class = SummaryWriter

    def scalar(self, stage: str, name: str, value: float, step: int) -> None:
        if self.writer_class is None:
            return
        if stage not in self.writers:
            self.writers[stage] = self.writer_class(log_dir=str(self.folder / stage), flush_secs=3600)
        self.writers[stage].add_scalar(name, value, step)

    def sync(self, *, force: bool = False) -> None:
        """Upload every event file that grew (at most every `every_s` unless `force`); a failed upload waits
        for the next sync (the curves are late, never the run)."""
        if not self.writers or (not force and time.monotonic() - self._last_sync < self.every_s):
            return
        for writer in self.writers.values():
            writer.flush()
        for path in sorted(self.folder.rglob("events.out.tfevents.*")):
            size = path.stat().st_size
            if self.sent.get(path) == size:
                continue
            key = run_key(self.lang, self.run_id, f"{FOLDER}/{path.relative_to(self.folder).as_posix()}")
            try:
                self.bucket.upload(path, key)
            except StorageError as exc:
                self.log.line(f"TensorBoard file not uploaded ({exc}); the next sync tries again")
                continue
            self.sent[path] = size
        self._last_sync = time.monotonic()

    def close(self) -> None:
        """The last sync, then the writers closed; never raises (it runs however the run ended)."""
        try:
            self.sync(force=True)
            for writer in self.writers.values():
                writer.close()
        except Exception as exc:  # noqa: BLE001 - the curves are a view: the run's end must not depend on them
            print(f"TensorBoard files not closed ({type(exc).__name__}: {exc})", flush=True)
