"""A run's own data: at its first start the trainer copies `<lang>/data/` (all but `previous/`) to
`<lang>/runs/<run-id>/data/` and records the copy in `metadata/data.json`, written last; every start of the
run (a resume after a preemption, a `train --resume`) then reads its labelled data, unlabelled texts and
corpus from that copy. A `data push` meanwhile changes what later runs read, never this one's.

A copy cut short (no record yet) is taken again at the next start: nothing has trained on it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from trainer.runfiles.data_copy import RunDataBucket, data_prefix, read_record
from trainer.runfiles.keys import DATA_RECORD, RUN_DATA, run_key
from trainer.runfiles.timestamps import now_iso
from trainer.runtime import distributed as D
from trainer.storage.checksums import stream_checksum


def backups_prefix(lang: str) -> str:
    """Where `data push` keeps the versions it replaced: never part of a run's data."""
    return f"{lang}/data/previous/"


def copy_data(bucket, lang: str, run_id: str, log) -> dict:
    """Copy the language's data into the run's folder, a file at a time through a local file; -> the record."""
    source, backups = data_prefix(lang), backups_prefix(lang)
    files = {}
    with tempfile.TemporaryDirectory(prefix="run-data-") as tmp:
        local = Path(tmp) / "file"
        for key in bucket.list(source):
            if key.startswith(backups):
                continue
            name = key[len(source) :]
            bucket.download(key, local)
            with local.open("rb") as fh:
                checksum = stream_checksum(fh)
            bucket.upload(local, run_key(lang, run_id, RUN_DATA + name))
            files[name] = {"size": local.stat().st_size, "md5": checksum.md5, "crc32c": checksum.crc32c}
            local.unlink()
    record = {"pinned_at": now_iso(), "source": bucket.url(source), "files": files}
    bucket.write_bytes(run_key(lang, run_id, DATA_RECORD), json.dumps(record, indent=2).encode())
    size = sum(f["size"] for f in files.values())
    log.line(
        f"data: this run's own copy of {bucket.url(source)} ({len(files)} file(s), {size:,} bytes) in "
        f"{bucket.url(run_key(lang, run_id, RUN_DATA))}: pushes from now on are for later runs"
    )
    return record


def run_data_bucket(bucket, lang: str, run_id: str, ctx: D.Context, log) -> RunDataBucket:
    """The bucket as the run's stages see it: `<lang>/data/` is the run's own copy (taken now, rank 0 first, at
    the run's first start)."""
    with D.rank0_first(ctx):
        record = read_record(bucket, lang, run_id)
        if record is None and ctx.main:
            copy_data(bucket, lang, run_id, log)
        elif ctx.main:
            log.line(f"data: this run's own copy, taken {record['pinned_at']} ({len(record['files'])} file(s))")
    return RunDataBucket(bucket, lang, run_id)
