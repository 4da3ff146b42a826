"""A run's own copy of its data (`<lang>/runs/<run-id>/data/`, what it holds in `metadata/data.json`; taken by
trainer.runtime.run_data at the run's first start) and the bucket as the run reads it: `<lang>/data/` from that
copy. trainctl reads a resumed run's data through the same view."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.runfiles.keys import DATA_RECORD, RUN_DATA, run_key


def data_prefix(lang: str) -> str:
    return f"{lang}/data/"


def read_record(bucket, lang: str, run_id: str) -> dict | None:
    """The run's `metadata/data.json`: {pinned_at, source, files: {name: {size, md5, crc32c}}}; None before its copy."""
    key = run_key(lang, run_id, DATA_RECORD)
    return json.loads(bucket.read_bytes(key)) if bucket.exists(key) else None


class RunDataBucket:
    """A bucket whose `<lang>/data/` reads come from the run's copy (`<lang>/runs/<id>/data/`), under the same
    keys, so that every reader of the data (labelled files, unlabelled texts, corpus, tokenizer samples) reads
    the run's version without knowing of it; URLs in messages name the copy. Everything else passes through."""

    def __init__(self, bucket, lang: str, run_id: str):
        self.inner = bucket
        self.source, self.copy = data_prefix(lang), run_key(lang, run_id, RUN_DATA)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def _at(self, key: str) -> str:
        return self.copy + key[len(self.source) :] if key.startswith(self.source) else key

    def read_bytes(self, key: str) -> bytes:
        return self.inner.read_bytes(self._at(key))

    def exists(self, key: str) -> bool:
        return self.inner.exists(self._at(key))

    def open_read(self, key: str):
        return self.inner.open_read(self._at(key))

    def download(self, key: str, dest: Path) -> None:
        self.inner.download(self._at(key), dest)

    def checksum(self, key: str):
        return self.inner.checksum(self._at(key))

    def url(self, key: str) -> str:
        return self.inner.url(self._at(key))

    def list(self, prefix: str) -> list[str]:
        if prefix.startswith(self.source):  # the copy's keys, named as the data's
            return [self.source + k[len(self.copy) :] for k in self.inner.list(self._at(prefix))]
        keys = self.inner.list(prefix)
        if not self.source.startswith(prefix):
            return keys
        # a listing above <lang>/data/: the copy stands in for it
        return sorted([k for k in keys if not k.startswith(self.source)] + self.list(self.source))
