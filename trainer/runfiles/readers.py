"""Reading a run's documents from the bucket: any JSON one, metrics.json typed, the scored predictions, and
the error for a file that is there but unreadable."""

from __future__ import annotations

import csv
import io
import json

from trainer.runfiles.keys import run_key
from trainer.runfiles.metrics_file import RunMetrics
from trainer.storage import Bucket


class RunFileError(ValueError):
    """A run file that is there but cannot be read (truncated, not JSON, not a run's): `url` names it."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"{url}: unreadable ({reason})")
        self.url, self.reason = url, reason


def read_json(bucket: Bucket, key: str) -> dict | None:
    """A JSON document of a run folder; None where it is missing or unreadable."""
    try:
        return json.loads(bucket.read_bytes(key)) if bucket.exists(key) else None
    except ValueError:
        return None


def read_metrics(bucket: Bucket, lang: str, run_id: str) -> RunMetrics | None:
    """The run's metrics.json, typed (None until the run has written it: it is written last)."""
    key = run_key(lang, run_id, "metrics.json")
    if not bucket.exists(key):
        return None
    try:
        return RunMetrics.from_json(bucket.read_bytes(key))
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise RunFileError(bucket.url(key), f"{type(exc).__name__}: {str(exc)[:120]}") from None


def scored_predictions(bucket: Bucket, lang: str, run_id: str, metrics: RunMetrics) -> list[dict] | None:
    """The rows of `<split>_predictions.csv` for the split the run's figures come from (None: no file)."""
    key = run_key(lang, run_id, f"{metrics.scored_rows or 'valid'}_predictions.csv")
    if not bucket.exists(key):
        return None
    return list(csv.DictReader(io.StringIO(bucket.read_bytes(key).decode("utf-8"), newline="")))
