"""A push: every file checked (and copied on the same read into a private folder), then the bucket opened,
conflicts told by checksum (nothing downloaded), the versions it replaces kept, and each file that differs uploaded
from its private copy, the bytes checked, a chunk at a time; a file changed since its check is refused first."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from stacks.datasets.checks import (
    check_labelled,
    check_texts,
    read_the_rest,
    refuse_changed,
    warn_ignored,
    warn_stale_splits,
    warn_unseen_labels,
)
from stacks.datasets.files import other_formats, plan_uploads
from stacks.datasets.report import PushListener, PushReport, size_text
from stacks.errors import TrainstackError
from trainer.storage import open_bucket
from trainer.storage.checksums import CHUNK


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _planned_uploads(lang: str, path: Path) -> list[tuple[Path, str]]:
    """(local file, bucket key) pairs for `path`, a data file or a folder; nothing to stage is an error."""
    if not path.exists():
        raise TrainstackError(f"{path} does not exist", hint="pass a train.csv or a folder holding one")
    if not (path.is_dir() or path.is_file()):
        raise TrainstackError(
            f"{path} is neither a data file nor a folder",
            hint="pass a train.csv (.jsonl, .parquet) or a folder holding one",
        )
    pairs = plan_uploads(lang, path)
    if not pairs:
        raise TrainstackError(
            f"nothing to upload in {path} (expected train.csv|.jsonl|.parquet, valid.*, test.*, corpus/*.txt[.gz])",
            hint="name the data file, or put train.csv (and valid/test, corpus/) in the folder",
        )
    return pairs


def push_data(
    lang: str,
    path: Path,
    *,
    data_settings,
    bucket_uri: str,
    replace: bool,
    listener: PushListener,
    now: Callable[[], datetime] = utc_now,
) -> PushReport:
    """Check every file of `path` (a data file, or a folder of them), then stage those that differ from the
    bucket's (`replace`: a differing file replaces the bucket's, kept first under <lang>/data/previous/) -> what
    was done. `data_settings`: the language's `data` config; `now`: the clock that names the backups' folder."""
    pairs = _planned_uploads(lang, path)
    with tempfile.TemporaryDirectory(prefix="trainctl-push-") as private:
        report = PushReport(pairs, listener, Path(private))
        _push(lang, path, pairs, report, data_settings=data_settings, bucket_uri=bucket_uri, replace=replace, now=now)
    return report


def _push(
    lang: str,
    path: Path,
    pairs: list[tuple[Path, str]],
    report: PushReport,
    *,
    data_settings,
    bucket_uri: str,
    replace: bool,
    now: Callable[[], datetime],
) -> None:
    """push_data's work, its private copies in report.private."""
    if path.is_dir():
        warn_ignored(path, pairs, report)
    # every file is read through before the bucket is opened: bad input leaves the bucket as it was. The same
    # read copies it: what is uploaded is the copy, the bytes checked, whatever happens to the file meanwhile.
    check_texts(pairs, data_settings.text_col, report)
    parsed = check_labelled(pairs, data_settings, report)
    read_the_rest(pairs, report)
    bucket = open_bucket(bucket_uri)
    report.bucket_url = bucket.url(lang + "/")
    same = {key: _same_as_staged(bucket, key, report) for _, key in pairs}
    conflicts = [key for _, key in pairs if same[key] is False]
    # train.jsonl over a train.csv: the old format would leave two candidate files
    conflicts += [other for _, key in pairs for other in other_formats(bucket, key)]
    if conflicts and not replace:
        raise TrainstackError(
            f"{len(conflicts)} file(s) already in the bucket differ: {', '.join(bucket.url(k) for k in conflicts)}",
            hint="rerun with --replace to replace them (the old versions are kept under <lang>/data/previous/)",
        )
    warn_stale_splits(bucket, lang, pairs, report)
    warn_unseen_labels(bucket, lang, parsed, pairs, data_settings, report)
    refuse_changed(pairs, report)  # the last moment before the bucket changes
    backups = Backups(bucket, lang, now)
    for other in [k for k in conflicts if k not in report.files]:
        backup = backups.keep(other)
        bucket.delete(other)
        report.replaced.append({"key": other, "backup": backup})
        report.say(f"kept the previous {other} as {backup} (replaced by another format)")
    _stage(bucket, pairs, same, backups, report)
    uploaded = sum(1 for f in report.files.values() if f["action"] == "uploaded")
    report.say(f"uploaded {uploaded} file(s), {len(pairs) - uploaded} unchanged, to {report.bucket_url}")
    if uploaded or report.replaced:
        tell_active_runs(bucket, lang, report, now)


# max_run_hours' bound (stacks.config.models): no run is active longer after its start, resumes included
LONGEST_RUN_H = 168
STARTING_H = 1  # a run folder without a status this long after its start never started


def tell_active_runs(bucket, lang: str, report: PushReport, now: Callable[[], datetime]) -> None:
    """Say what the push means to each active run of the language (one started within LONGEST_RUN_H, its status
    not final): one with its own copy of the data keeps training on it; one that has not read its data yet
    (queued, or its machine starting) trains on this push."""
    from trainer.runfiles.keys import DATA_RECORD, run_key
    from trainer.runfiles.run_ids import run_started_at
    from trainer.runfiles.status_file import read_status

    oldest = now().timestamp() - LONGEST_RUN_H * 3600
    for run_id in bucket.folders(f"{lang}/runs/"):
        started = run_started_at(run_id)
        if started is not None and started < oldest:
            continue
        status = read_status(bucket, lang, run_id)
        if status is None:  # applied moments ago, its trainer not started yet (or never started: left alone)
            if started is None or started < now().timestamp() - STARTING_H * 3600:
                continue
            state = "STARTING"
        elif status.terminal:
            continue
        else:
            state = status.state
        own_copy = bucket.exists(run_key(lang, run_id, DATA_RECORD))
        report.active_runs.append(
            {"run_id": run_id, "state": state, "trains_on": "own copy" if own_copy else "this push"}
        )
        if own_copy:
            report.say(
                f"run {run_id} ({state}) keeps training, resuming and scoring on its own copy of the data it "
                f"started with ({lang}/runs/{run_id}/data/); this push is for the runs started from now on"
            )
        else:
            report.say(f"run {run_id} ({state}) has not read its data yet: it trains on this push")


def _same_as_staged(bucket, key: str, report: PushReport) -> bool | None:
    """Whether the bucket's `key` holds the bytes checked for it, told by their checksums; None when it has no
    such object. Checksums with no digest in common (an object with neither md5 nor crc32c, a local crc32c not
    taken) fall back to reading both, a chunk at a time."""
    staged = bucket.checksum(key)
    if staged is None:
        return None
    same = report.checksums[key].same_as(staged)
    return _same_bytes(bucket, report.copies[key], key) if same is None else same


def _same_bytes(bucket, src: Path, key: str) -> bool:
    with bucket.open_read(key) as theirs, src.open("rb") as mine:
        while True:
            chunk = mine.read(CHUNK)
            if theirs.read(len(chunk) or 1) != chunk:
                return False
            if not chunk:
                return True


def _stage(
    bucket, pairs: list[tuple[Path, str]], same: dict[str, bool | None], backups: Backups, report: PushReport
) -> None:
    """Upload the private copy of each file that differs from the bucket's (its old version kept first): a line
    per file, the bytes sent on the listener's progress."""
    sizes = {key: report.copies[key].stat().st_size for _, key in pairs}
    with report.listener.progress(sum(sizes.values())) as progress:
        for _, key in pairs:
            with progress.file(key, sizes[key]) as sent:
                if same[key]:
                    report.note(key, action="unchanged", url=bucket.url(key))
                    report.say(f"unchanged {key}")
                    continue
                backup = None if same[key] is None else backups.keep(key)
                if backup is not None:
                    report.say(f"kept the previous {key} as {backup}")
                bucket.upload(report.copies[key], key, progress=sent)
            report.note(key, action="uploaded", url=bucket.url(key), backup=backup)
            report.say(f"staged {key} ({size_text(sizes[key])})")


class Backups:
    """Where one push keeps the versions it replaces: `<lang>/data/previous/<UTC time>-<suffix>/`, a folder of its
    own (microseconds and a random suffix), each copy written only where nothing is (never over an earlier
    backup, whatever the clock says)."""

    def __init__(self, bucket, lang: str, now: Callable[[], datetime] = utc_now):
        self.bucket, self.lang, self.now, self.folder = bucket, lang, now, None

    def _new_folder(self) -> str:
        stamp = self.now().strftime("%Y%m%d-%H%M%S.%f")
        return f"{self.lang}/data/previous/{stamp}-{secrets.token_hex(3)}/"

    def keep(self, key: str) -> str:
        """Copy `key` into this push's folder -> the backup's key."""
        data = self.bucket.read_bytes(key)
        for _ in range(5):
            self.folder = self.folder or self._new_folder()
            backup = self.folder + key[len(self.lang) + 1 :]
            if self.bucket.write_bytes(backup, data, if_absent=True):
                return backup
            self.folder = None  # taken: another push used the same name
        raise RuntimeError(f"could not find a free backup folder for {key} under {self.lang}/data/previous/")
