"""TensorBoard event files of a run, in one folder uploaded to `<run>/tensorboard/` as it grows, so
`tensorboard --logdir <bucket>/<lang>/runs` shows every run of the language while it trains, each run one
TensorBoard run: curves side by side, and in the HParams tab its settings beside its final figures.

Tags and steps are MLflow's mirror's (trainer/runfiles/curves.py): `<stage>/<figure>` (one section per
stage), at the run's global epoch. Written with TensorBoard's own writer (torch.utils.tensorboard) into the
work folder, then copied whole whenever a file grew (the event files are small: a few scalars an epoch).
Without the `tensorboard` package the run says so once and trains on: the curves are a view, metrics.json
is the record.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from trainer.runfiles.curves import final_figures, run_params
from trainer.runfiles.keys import run_key
from trainer.storage import Bucket, StorageError

FOLDER = "tensorboard"


def hparam_values(settings: dict) -> dict[str, object]:
    """What the HParams tab can hold: numbers stay numbers (its axes and filters), the rest as MLflow's
    params show them (`True`, `None`, a list's repr)."""
    return {
        k: v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else str(v) for k, v in settings.items()
    }


class Board:
    """Rank 0's TensorBoard writer, one for the run."""

    def __init__(
        self,
        bucket: Bucket,
        lang: str,
        run_id: str,
        folder: Path,
        log,
        *,
        settings: dict | None = None,
        every_s: float = 5.0,
    ):
        self.bucket, self.lang, self.run_id, self.folder, self.log = bucket, lang, run_id, folder, log
        self.settings = settings or {}  # the run's hyper-parameters (trainer/runfiles/curves.py run_settings)
        self.every_s, self._last_sync = every_s, 0.0
        self.writer = None
        self.sent: dict[Path, int] = {}  # event file -> bytes uploaded
        try:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
        except ImportError:
            self.writer_class = None
            log.line("tensorboard is not installed: no TensorBoard curves for this run (metrics.json has the figures)")
        else:
            self.writer_class = SummaryWriter

    def _writer(self):
        if self.writer is None:
            self.writer = self.writer_class(log_dir=str(self.folder), flush_secs=3600)
        return self.writer

    def scalar(self, key: str, value: float, step: int) -> None:
        if self.writer_class is not None:
            self._writer().add_scalar(key, value, step)

    def hparams(self, doc: dict, trainer_meta: dict | None = None) -> None:
        """The run as one HParams session: its params as MLflow's mirror has them (curves.run_params: what
        metadata/trainer.json and metrics.json record; the arguments alone without trainer.json), and
        metrics.json's final figures at the last epoch's step, so the language's runs compare in one table."""
        if self.writer_class is None:
            return
        from torch.utils.tensorboard.summary import hparams

        finals, step = final_figures(doc), len(doc.get("history") or [])
        settings = run_params(trainer_meta, doc) if trainer_meta else self.settings
        writer = self._writer()
        # the experiment (settings, metric names), the session's start and its end: three summaries
        for summary in hparams(hparam_values(settings), finals):
            writer.file_writer.add_summary(summary, step)
        for key, value in finals.items():
            writer.add_scalar(key, value, step)

    def sync(self, *, force: bool = False) -> None:
        """Upload every event file that grew (at most every `every_s` unless `force`); a failed upload waits
        for the next sync (the curves are late, never the run)."""
        if self.writer is None or (not force and time.monotonic() - self._last_sync < self.every_s):
            return
        self.writer.flush()
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
        """The final figures of a run that finished, the last sync, then the writer closed; never raises
        (it runs however the run ended)."""
        for part in (self._finals, lambda: self.sync(force=True), self._close_writer):
            try:  # each on its own: metrics.json unread, the curves are still uploaded and closed
                part()
            except Exception as exc:  # noqa: BLE001 - the curves are a view: never what ends the run
                print(f"TensorBoard files not closed ({type(exc).__name__}: {exc})", flush=True)

    def _finals(self) -> None:
        """metrics.json is written last, by a run that finished (after metadata/trainer.json): the records
        MLflow's mirror reads too."""
        key, meta = (run_key(self.lang, self.run_id, name) for name in ("metrics.json", "metadata/trainer.json"))
        if self.writer_class is not None and self.bucket.exists(key):
            trainer_meta = json.loads(self.bucket.read_bytes(meta)) if self.bucket.exists(meta) else None
            self.hparams(json.loads(self.bucket.read_bytes(key)), trainer_meta)

    def _close_writer(self) -> None:
        if self.writer is not None:
            self.writer.close()
