"""A run folder as the tracker shows it: tags, params, metrics with their steps, datasets, files to attach.

Pure translation (stdlib only, no MLflow here): what the bucket holds (status.json, metrics.json, log.txt,
metadata/trainer.json, trainctl.json, placements.json, cost.json, the base LM's meta.json) becomes one
`Mirror`, which export.py writes and which a second export compares against, so a run mirrored twice is
the same run.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from stacks.tracking.run_tags import TAG, base_lm_tags, folder_url, machine_tags, system_tags
from trainer.runfiles.curves import after_run_figures, epoch_points, final_figures, finite, key_name, run_params
from trainer.runfiles.keys import (
    DATA_RECORD,
    PLACEMENTS_META,
    RESTARTS_META,
    RUN_DATA,
    TRAINCTL_META,
    run_key,
    run_prefix,
)
from trainer.runfiles.placements import placements_summary
from trainer.runfiles.restarts import read_restarts
from trainer.runfiles.status_file import FAILED, SUCCEEDED
from trainer.storage import Bucket

RUN_ID_TAG = f"{TAG}run_id"
SOURCE_TAG = f"{TAG}source_sha"  # the sha256 of what the mirror was made from: unchanged, nothing to write
COST_META = "metadata/cost.json"  # written by trainctl once a run has ended (stacks/runs/records.py)

# The files a run's page attaches (those the run has); model.pth goes up as the logged model, not here.
FILES = (
    "metrics.json",
    "report.html",
    "log.txt",
    "valid_predictions.csv",
    "test_predictions.csv",
    "plots/history.png",
    "plots/per_label_f1.png",
    "metadata/trainer.json",
    RESTARTS_META,  # each restart after a failure not the code's (absent: none)
)
# The line EpochLogCallback writes at each epoch's end: `<time> <stage> [<phase>] epoch <n>/<total>  figures`
_EPOCH_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (\S+) \[([^\]]*)\] epoch (\d+)/\d+(?:\s|$)")


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    step: int
    timestamp_ms: int


@dataclass(frozen=True)
class Dataset:
    """What a run trained or was scored on, as an MLflow dataset input: each split's own digest, and the
    columns its rows were read from."""

    name: str  # `<lang>-<context>`: MLflow tells datasets apart by name and digest, so each split its own
    digest: str
    source_uri: str  # the bucket folder the run read its data from
    context: str  # train, valid, test
    rows: int | None = None
    columns: tuple[tuple[str, str], ...] = ()  # (name, MLflow type): the text column, then the label column(s)

    @property
    def source_type(self) -> str:
        """MLflow's name for the source's kind, as its artifact dataset sources name them (gs, local)."""
        scheme = self.source_uri.split("://", 1)[0] if "://" in self.source_uri else "file"
        return "local" if scheme == "file" else scheme

    @property
    def profile(self) -> str | None:
        return json.dumps({"num_rows": self.rows}) if self.rows is not None else None

    @property
    def schema(self) -> str | None:
        """MLflow's column spec, as its own datasets write theirs (`{"mlflow_colspec": [...]}`)."""
        if not self.columns:
            return None
        spec = [{"type": kind, "name": name, "required": True} for name, kind in self.columns]
        return json.dumps({"mlflow_colspec": spec})


@dataclass
class Mirror:
    """Everything the tracker holds of one run, derived from the bucket only."""

    lang: str
    run_id: str
    state: str  # the trainstack state: PENDING, RUNNING, SUCCEEDED, FAILED
    start_ms: int | None
    end_ms: int | None
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # run-folder names, attached under the same paths
    model: bool = False  # a classifier run that succeeded: its model is logged (and may be registered)
    source_sha: str = ""
    datasets: list[Dataset] = field(default_factory=list)
    final_step: int = 0  # the step of the final figures and of the logged model: the run's last epoch

    @property
    def name(self) -> str:
        return f"{self.lang}-{self.run_id}"

    @property
    def mlflow_status(self) -> str:
        return {SUCCEEDED: "FINISHED", FAILED: "FAILED"}.get(self.state, "RUNNING")


def _ms(iso: str | None) -> int | None:
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1000) if iso else None
    except ValueError:
        return None


def _json(bucket: Bucket, key: str) -> dict | None:
    return json.loads(bucket.read_bytes(key)) if bucket.exists(key) else None


def epoch_end_times(log: str) -> dict[tuple[str, str, int], int]:
    """(stage, phase, epoch) -> when that epoch ended (ms), from its line in log.txt. A resumed run that ran
    an epoch again logs it twice: the later line wins, as the later figures are the ones its history keeps."""
    ends = {}
    for line in log.splitlines():
        if (found := _EPOCH_LINE.match(line)) and (at := _ms(found.group(1).replace("Z", "+00:00"))):
            ends[(found.group(2), found.group(3), int(found.group(4)))] = at
    return ends


def _history_metrics(history: list[dict], *, start_ms: int, ends: dict) -> list[Metric]:
    """One point per epoch and figure, named and stepped as TensorBoard's (trainer/runfiles/curves.py), at
    the time the epoch ended (its log line); an epoch the log does not show (a log written before epoch
    lines had a phase, a log lost) sits at the run's start plus its step."""
    out = []
    for step, record, figures in epoch_points(history):
        at = ends.get((record.get("stage"), record.get("phase", ""), record.get("epoch")), start_ms + step)
        out += [Metric(key, number, step, at) for key, number in figures.items()]
    return out


def _points(figures: dict[str, object], *, step: int, at_ms: int) -> list[Metric]:
    return [Metric(key_name(k), v, step, at_ms) for k, value in figures.items() if (v := finite(value)) is not None]


def _datasets(bucket: Bucket, lang: str, run_id: str, *, doc: dict, trainer_meta: dict) -> list[Dataset]:
    """The splits a classifier run trained, tuned and was scored on, or the corpus a base LM read; all from the
    run's own copy of `<lang>/data/` (trainer.runtime.run_data; `<lang>/data/` itself for a run from before
    copies), told apart by their context."""
    pinned = bucket.exists(run_key(lang, run_id, DATA_RECORD))
    source = folder_url(bucket, run_key(lang, run_id, RUN_DATA) if pinned else f"{lang}/data/")
    if doc.get("job") == "pretrain-lm":
        corpus = doc.get("base_lm") or {}
        digest = corpus.get("corpus_hash")
        if not digest:
            return []
        return [Dataset(f"{lang}-corpus", digest, source, "train", corpus.get("corpus_tokens"))]
    data_hash = trainer_meta.get("data_hash")
    if not data_hash:
        return []
    counts = {"train": doc.get("n_train"), "valid": doc.get("n_valid"), "test": doc.get("n_test")}
    # a run from before each split had its digest: the data's hash with the split's name, still one per split
    digests = trainer_meta.get("split_digests") or {}
    return [
        Dataset(
            f"{lang}-{split}",
            digests.get(split) or hashlib.sha256(f"{data_hash}|{split}".encode()).hexdigest()[:16],
            source,
            split,
            rows,
            data_columns(trainer_meta.get("args") or {}),
        )
        for split, rows in counts.items()
        if split != "test" or rows
    ]


def data_columns(args: dict) -> tuple[tuple[str, str], ...]:
    """The columns a classifier run read its rows from, with their MLflow types: its text, then its labels
    (one column of labels, or a 0/1 column per label)."""
    if not args.get("text_col"):
        return ()
    if args.get("label_cols"):
        return ((args["text_col"], "string"), *((name, "long") for name in args["label_cols"]))
    return ((args["text_col"], "string"), *(((args["label_col"], "string"),) if args.get("label_col") else ()))


def _log_text(bucket: Bucket, lang: str, run_id: str) -> str:
    """log.txt as its readers see it (a running gs:// run's log is still in pieces)."""
    data, _ = bucket.read_appended(run_key(lang, run_id, "log.txt"))
    return data.decode("utf-8", errors="replace")


def _tags(bucket: Bucket, lang: str, run_id: str, *, env: str, files: dict) -> dict[str, str]:
    status, doc, trainer_meta, trainctl_meta = (files[k] for k in ("status", "doc", "trainer", "trainctl"))
    state, job = status.get("state") or "PENDING", _job(files)
    tags = {
        RUN_ID_TAG: run_id,
        f"{TAG}lang": lang,
        f"{TAG}env": status.get("env") or env,
        f"{TAG}job": job,
        f"{TAG}state": state,
        f"{TAG}run_url": bucket.url(run_prefix(lang, run_id)),
        f"{TAG}git_sha": str(trainctl_meta.get("git_sha") or "unknown"),
    }
    tags.update(system_tags(lang=lang, run_id=run_id, job=job, trainctl_meta=trainctl_meta, trainer_meta=trainer_meta))
    tags.update(base_lm_tags(bucket, lang, doc.get("base_lm") or trainer_meta.get("base_lm") or {}))
    tags.update(machine_tags(trainctl_meta, files["cost"], files["moves"], trainer_meta))
    if doc.get("kept"):
        tags[f"{TAG}kept"] = str(doc["kept"])
    if status.get("error"):
        tags[f"{TAG}error"] = str(status["error"])[:4000]
    restarts = read_restarts(bucket, lang, run_id)
    if restarts:  # the records themselves: the metadata/restarts.json artifact
        tags[f"{TAG}restarts"] = str(len(restarts))
    return tags


def _job(files: dict) -> str:
    return (
        files["doc"].get("job")
        or files["status"].get("job")
        or (files["trainer"].get("args") or {}).get("job")
        or "classifier"
    )


def _metrics(
    bucket: Bucket, lang: str, run_id: str, *, files: dict, start: int | None, end: int | None
) -> list[Metric]:
    doc, state, moves = files["doc"], files["status"].get("state"), files["moves"]
    history = list(doc.get("history") or [])
    ends = epoch_end_times(_log_text(bucket, lang, run_id)) if history else {}
    metrics = _history_metrics(history, start_ms=start or 0, ends=ends)
    final_at, step = end or start or 0, len(history)
    if doc and state == SUCCEEDED:
        metrics += _points(final_figures(doc), step=step, at_ms=final_at)
    if state in (SUCCEEDED, FAILED):  # what Spot and the machines cost the run, in time and money
        estimate = files["trainctl"].get("cost_estimate") or {}
        metrics += _points(after_run_figures(files["cost"], estimate, moves), step=step, at_ms=final_at)
    return metrics


def _run_files(bucket: Bucket, lang: str, run_id: str) -> dict:
    files = {
        name: _json(bucket, run_key(lang, run_id, key)) or {}
        for name, key in (
            ("status", "status.json"),
            ("doc", "metrics.json"),
            ("trainer", "metadata/trainer.json"),
            ("trainctl", TRAINCTL_META),
            ("cost", COST_META),
        )
    }
    files["moves"] = placements_summary(_json(bucket, run_key(lang, run_id, PLACEMENTS_META)))
    return files


def _source_sha(mirror: Mirror) -> str:
    content = [
        mirror.tags,
        mirror.params,
        [m.__dict__ for m in mirror.metrics],
        mirror.files,
        mirror.model,
        [d.__dict__ for d in mirror.datasets],
    ]
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_mirror(bucket: Bucket, lang: str, run_id: str, *, env: str) -> Mirror:
    """The run as the tracker should show it now (a running run: what is there so far)."""
    files = _run_files(bucket, lang, run_id)
    status, doc = files["status"], files["doc"]
    state = status.get("state") or "PENDING"
    start = _ms(status.get("started_at")) or _ms(status.get("updated_at"))
    end = _ms(status.get("finished_at")) if state in (SUCCEEDED, FAILED) else None
    model = state == SUCCEEDED and _job(files) == "classifier" and bucket.exists(run_key(lang, run_id, "model.pth"))
    mirror = Mirror(
        lang,
        run_id,
        state,
        start,
        end,
        _tags(bucket, lang, run_id, env=env, files=files),
        {k: str(v) for k, v in run_params(files["trainer"], doc).items()},
        _metrics(bucket, lang, run_id, files=files, start=start, end=end),
        [name for name in FILES if bucket.exists(run_key(lang, run_id, name))],
        model=model,
        datasets=_datasets(bucket, lang, run_id, doc=doc, trainer_meta=files["trainer"]),
        final_step=len(doc.get("history") or []),
    )
    mirror.source_sha = _source_sha(mirror)
    mirror.tags[SOURCE_TAG] = mirror.source_sha
    return mirror
