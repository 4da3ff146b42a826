"""A run folder as the tracker shows it: tags, params, metrics with their steps, and the files to attach.

Pure translation (stdlib only, no MLflow here): what the bucket holds (status.json, metrics.json,
metadata/trainer.json, metadata/trainctl.json) becomes one `Mirror`, which export.py writes and which a
second export compares against, so a run mirrored twice is the same run.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from trainer.runfiles.status_file import FAILED, PLACEMENTS_META, SUCCEEDED, placements_summary, run_key, run_prefix
from trainer.storage import Bucket

TAG = "trainstack."  # every tag of ours starts so; `trainstack.run_id` finds a run's mirror
RUN_ID_TAG = f"{TAG}run_id"
SOURCE_TAG = f"{TAG}source_sha"  # the sha256 of what the mirror was made from: unchanged, nothing to write

# The files a run's page attaches (those the run has); model.pth goes up as the logged model, not here.
FILES = ("metrics.json", "report.html", "log.txt", "valid_predictions.csv", "test_predictions.csv",
         "plots/history.png", "plots/per_label_f1.png", "metadata/trainer.json")
_KEY_BAD = re.compile(r"[^\w.\- /]")  # MLflow accepts letters, digits, _ - . space / in a key


def key_name(text: str) -> str:
    """A metric or param key MLflow accepts (`macro_f1@0.5` -> `macro_f1_at_0.5`; any script's letters stay)."""
    return _KEY_BAD.sub("_", text.replace("@", "_at_"))


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    step: int
    timestamp_ms: int


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

    @property
    def name(self) -> str:
        return f"{self.lang} {self.run_id}"

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


def _finite(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _history_metrics(history: list[dict], start_ms: int) -> list[Metric]:
    """One point per epoch and figure, keyed `<stage>/<figure>`, step = the run's global epoch (stages in the
    order they ran), timestamped from the run's start plus the step (a re-export writes the same points)."""
    out, step = [], 0
    for record in history:
        step += 1
        for name, value in record.items():
            if name in ("stage", "phase", "epoch") or (number := _finite(value)) is None:
                continue
            out.append(Metric(key_name(f"{record['stage']}/{name}"), number, step, start_ms + step))
    return out


def _final_metrics(doc: dict, at_ms: int, step: int) -> list[Metric]:
    """The kept model's figures, each label's F1, the classifier alone, the baselines; or a pretrain's perplexity."""
    figures: dict[str, object] = {}
    if doc.get("job") == "pretrain-lm":
        figures["perplexity"] = doc.get("perplexity")
        figures["tokens"] = (doc.get("base_lm") or {}).get("tokens")
    else:
        for name in ("macro_f1", "micro_f1", "accuracy"):
            figures[name] = doc.get(name)
        for label, values in (doc.get("per_label") or {}).items():
            figures[f"f1/{label}"] = (values or {}).get("f1")
        for part, prefix in (("classifier", "classifier"), ("baseline_tfidf", "tfidf"), ("baseline", "majority"),
                             ("probe", "probe")):
            for name in ("macro_f1", "micro_f1", "accuracy"):
                figures[f"{prefix}/{name}"] = (doc.get(part) or {}).get(name)
        figures["blend_weight"] = (doc.get("blend") or {}).get("weight")
    figures["duration_s"] = doc.get("duration_s")
    return [Metric(key_name(k), v, step, at_ms) for k, value in figures.items() if (v := _finite(value)) is not None]


def read_mirror(bucket: Bucket, lang: str, run_id: str, *, env: str) -> Mirror:
    """The run as the tracker should show it now (a running run: what is there so far)."""
    status = _json(bucket, run_key(lang, run_id, "status.json")) or {}
    doc = _json(bucket, run_key(lang, run_id, "metrics.json")) or {}
    trainer_meta = _json(bucket, run_key(lang, run_id, "metadata/trainer.json")) or {}
    trainctl_meta = _json(bucket, run_key(lang, run_id, "metadata/trainctl.json")) or {}
    state = status.get("state") or "PENDING"
    job = doc.get("job") or status.get("job") or (trainer_meta.get("args") or {}).get("job") or "classifier"
    start = _ms(status.get("started_at")) or _ms(status.get("updated_at"))
    end = _ms(status.get("finished_at")) if state in (SUCCEEDED, FAILED) else None
    base_lm = doc.get("base_lm") or trainer_meta.get("base_lm") or {}
    tags = {RUN_ID_TAG: run_id, f"{TAG}lang": lang, f"{TAG}env": status.get("env") or env, f"{TAG}job": job,
            f"{TAG}state": state, f"{TAG}run_url": bucket.url(run_prefix(lang, run_id)),
            f"{TAG}base_lm": str(base_lm.get("id") or "none"), f"{TAG}git_sha": str(trainctl_meta.get("git_sha") or "unknown"),
            "mlflow.runName": f"{lang} {run_id}"}
    if doc.get("kept"):
        tags[f"{TAG}kept"] = str(doc["kept"])
    moves = placements_summary(_json(bucket, run_key(lang, run_id, PLACEMENTS_META)))
    if moves["placements"]:
        tags[f"{TAG}placements"] = " -> ".join(str(z) for z in moves["placements"])
    if status.get("error"):
        tags[f"{TAG}error"] = str(status["error"])[:4000]
    params = {key_name(k): str(v) for k, v in sorted((trainer_meta.get("args") or {}).items())
              if k not in ("bucket", "run_id", "work_dir", "env", "lang")}
    params.update({k: str(v) for k, v in (("data_hash", trainer_meta.get("data_hash")),
                                          ("tokenizer", doc.get("tokenizer")),
                                          ("n_train", doc.get("n_train")), ("n_valid", doc.get("n_valid")),
                                          ("n_test", doc.get("n_test")), ("device", trainer_meta.get("device")),
                                          ("precision_used", trainer_meta.get("precision")))
                   if v is not None})
    history = list(doc.get("history") or [])
    metrics = _history_metrics(history, start or 0)
    if doc and state == SUCCEEDED:
        metrics += _final_metrics(doc, end or start or 0, len(history))
    if moves["placements"] and state in (SUCCEEDED, FAILED):  # what Spot cost the run in time
        metrics += [Metric(f"spot/{name}", float(moves[name]), len(history), end or start or 0)
                    for name in ("preemptions", "capacity_wait_s", "interrupted_s")]
    names = [name for name in FILES if bucket.exists(run_key(lang, run_id, name))]
    mirror = Mirror(lang, run_id, state, start, end, tags, params, metrics, names,
                    model=state == SUCCEEDED and job == "classifier" and bucket.exists(run_key(lang, run_id, "model.pth")))
    digest = hashlib.sha256(json.dumps([tags, params, [m.__dict__ for m in metrics], names, mirror.model],
                                       sort_keys=True, default=str).encode())
    mirror.source_sha = digest.hexdigest()[:16]
    mirror.tags[SOURCE_TAG] = mirror.source_sha
    return mirror
