"""The promoted model of a language: `<lang>/models/CURRENT`, the run `predict` uses.

Promotion is a decision on figures, not on recency: a run is promoted only when it succeeded and,
unless forced, scores at least the promoted model's macro-F1 on the same rows (its test rows, else
its validation rows). Every promotion is kept under `<lang>/models/history/`; CURRENT is written
last, so a reader never sees a CURRENT without its record.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
from datetime import datetime, timezone

from stacks.errors import TrainstackError
from trainer.runfiles.metrics_file import RunMetrics, kept_model_name
from trainer.runfiles.readers import read_metrics, scored_predictions
from trainer.runfiles.status_file import SUCCEEDED, read_status
from trainer.runfiles.timestamps import now_iso
from trainer.storage import Bucket


class PromotionRefused(TrainstackError):
    """The run may not be promoted (failed, worse on the same rows, or not comparable)."""


class RowsDiffer(TrainstackError):
    """Two runs were scored on different rows: their figures do not compare."""


def current_key(lang: str) -> str:
    return f"{lang}/models/CURRENT"


def read_current(bucket: Bucket, lang: str) -> dict | None:
    """The promoted model's record (None: nothing promoted yet)."""
    key = current_key(lang)
    return json.loads(bucket.read_bytes(key)) if bucket.exists(key) else None


def decisive_f1(metrics: RunMetrics) -> float:
    """The macro-F1 of what `predict` serves: a kept blend's (the run's top-level figures), else the
    forward+backward ensemble when the run has one."""
    if metrics.blended:
        return metrics.model.macro_f1
    return (metrics.ensemble or metrics.model).macro_f1


def scored_rows(bucket: Bucket, lang: str, run_id: str, metrics: RunMetrics) -> tuple[str, int]:
    """(fingerprint, count) of the rows the run's figures come from: row ids, texts and true labels
    of its `<split>_predictions.csv`, so two runs compare only on the very same rows."""
    split = metrics.scored_rows or "valid"
    predictions = scored_predictions(bucket, lang, run_id, metrics)
    if predictions is None:
        return f"{split}:missing:{run_id}", 0  # compares equal to nothing else
    rows = [(row.get("row_id", ""), row.get("text", ""), row.get("true_labels", "")) for row in predictions]
    digest = hashlib.sha256()
    for row in sorted(rows):
        digest.update(json.dumps(row, ensure_ascii=False).encode())
    return f"{split}:{digest.hexdigest()[:16]}", len(rows)


def _successful_metrics(bucket: Bucket, lang: str, run_id: str) -> RunMetrics:
    status = read_status(bucket, lang, run_id)
    if status is None or status.state != SUCCEEDED:
        state = status.state if status else "not started"
        raise PromotionRefused(
            f"run {run_id} of {lang} did not succeed ({state}): only a successful run is promoted",
            hint=f"list the runs: trainctl runs --lang {lang}",
        )
    metrics = read_metrics(bucket, lang, run_id)
    if metrics is None or metrics.model is None:
        raise PromotionRefused(
            f"run {run_id} of {lang} has no classifier metrics (a base-LM run?)",
            hint="promote a classifier run (trainctl train); base LMs: trainctl lm use",
        )
    return metrics


def _served(metrics) -> str:
    """What predict serves for the run (the kept model)."""
    model = "forward+backward ensemble" if metrics.ensemble else "model.pth"
    served = kept_model_name(metrics.kept, metrics.blend_weight, classifier=model, times="x")
    return served if served == model else f"{served} (tfidf.json/.npz)"


def promote(
    bucket: Bucket, lang: str, run_id: str, *, force: bool = False, require_better: bool = False, who: str | None = None
) -> dict:
    """Write `run_id` as the promoted model of `lang` -> its record. Refuses a run that did not succeed,
    and (unless `force`) one below the promoted model's macro-F1 on the same rows, or scored on other rows.
    `require_better` (train --promote-if-better): also refuse a tie, and never force. The run already
    promoted: nothing written, its record with `unchanged` (a script that promotes twice succeeds twice)."""
    metrics = _successful_metrics(bucket, lang, run_id)
    f1 = decisive_f1(metrics)
    rows, count = scored_rows(bucket, lang, run_id, metrics)
    current = read_current(bucket, lang)
    if current and current["run_id"] == run_id:
        if require_better:
            raise PromotionRefused(f"run {run_id} is already the promoted model of {lang}")
        return {**current, "unchanged": True}
    if current and not force:
        if current.get("rows") != rows:
            raise PromotionRefused(
                f"run {run_id} was scored on other rows than the promoted run {current['run_id']} "
                f"({count} {metrics.scored_rows} rows vs {current.get('n_rows')} {current.get('scored_rows')} rows, "
                "different data or split): their macro-F1 do not compare",
                hint=f"promote it anyway: trainctl promote {lang} {run_id} --force",
            )
        if f1 < current["macro_f1"] or (require_better and f1 <= current["macro_f1"]):
            raise PromotionRefused(
                f"run {run_id} scores macro-F1 {f1:.4f}, the promoted run {current['run_id']} "
                f"{current['macro_f1']:.4f} on the same {count} {metrics.scored_rows} rows",
                hint=f"keep the promoted model, or: trainctl promote {lang} {run_id} --force",
            )
    tfidf = metrics.baseline_tfidf
    record = {
        "run_id": run_id,
        "lang": lang,
        "macro_f1": f1,
        "scored_rows": metrics.scored_rows,
        "n_rows": count,
        "rows": rows,
        "model": _served(metrics),
        "tfidf_macro_f1": tfidf.macro_f1 if tfidf else None,
        "micro_f1": metrics.model.micro_f1,
        "accuracy": metrics.model.accuracy,
        "n_train": metrics.n_train,
        "labels": metrics.labels,
        "promoted_by": who or f"{getpass.getuser()}@{socket.gethostname()}",
        "promoted_at": now_iso(),
        "forced": bool(force),
        "replaces": current["run_id"] if current else None,
    }
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    body = json.dumps(record, indent=2).encode()
    bucket.write_bytes(f"{lang}/models/history/{stamp}-{run_id}.json", body, if_absent=True)
    bucket.write_bytes(current_key(lang), body)  # last: CURRENT names a run whose record is kept
    return record


def promote_if_better(bucket: Bucket, lang: str, run_id: str) -> str:
    """`train --promote-if-better`: promote the run unless the promoted model is as good or better on the
    same rows (or was scored on other rows) -> what happened, in one line."""
    try:
        record = promote(bucket, lang, run_id, require_better=True)
    except PromotionRefused as refused:
        return f"not promoted: {refused.message}"
    return (
        f"promoted run {run_id} (macro-F1 {record['macro_f1']:.3f} on {record['n_rows']} {record['scored_rows']} rows)"
    )


def history(bucket: Bucket, lang: str) -> list[dict]:
    """Every promotion of `lang`, oldest first."""
    prefix = f"{lang}/models/history/"
    return [json.loads(bucket.read_bytes(key)) for key in sorted(bucket.list(prefix)) if key.endswith(".json")]


def compare(bucket: Bucket, lang_a: str, run_a: str, lang_b: str, run_b: str) -> dict:
    """Per-label F1 of two runs on the rows both scored; RowsDiffer when those are not the same rows."""
    figures = []
    for lang, run_id in ((lang_a, run_a), (lang_b, run_b)):
        metrics = read_metrics(bucket, lang, run_id)
        if metrics is None or metrics.model is None:
            raise RowsDiffer(
                f"run {run_id} ({lang}) has no classifier metrics yet",
                hint="compare two finished classifier runs (trainctl runs)",
            )
        figures.append((metrics, *scored_rows(bucket, lang, run_id, metrics)))
    (ma, rows_a, n_a), (mb, rows_b, n_b) = figures
    if rows_a != rows_b:
        why = (
            f"{run_a} scored {n_a} {ma.scored_rows} rows of {lang_a}, {run_b} {n_b} {mb.scored_rows} rows of {lang_b}"
            if (n_a, ma.scored_rows, lang_a) != (n_b, mb.scored_rows, lang_b)
            else f"both scored {n_a} {ma.scored_rows} rows, but not the same ones (different data or split seed)"
        )
        raise RowsDiffer(
            f"the runs were not scored on the same rows: {why}",
            hint="compare runs trained on the same data and split (same data, seed and split settings)",
        )
    labels = list(dict.fromkeys([*ma.labels, *mb.labels]))
    per_label = {
        label: {
            "a": ma.model.per_label[label].f1 if label in ma.model.per_label else None,
            "b": mb.model.per_label[label].f1 if label in mb.model.per_label else None,
            "support": (ma.model.per_label.get(label) or mb.model.per_label.get(label)).support,
        }
        for label in labels
    }
    return {
        "a": run_a,
        "b": run_b,
        "rows": rows_a,
        "n_rows": n_a,
        "scored_rows": ma.scored_rows,
        "per_label": per_label,
        "macro_f1": {"a": decisive_f1(ma), "b": decisive_f1(mb)},
        "tfidf_macro_f1": {"a": ma.tfidf_macro_f1, "b": mb.tfidf_macro_f1},
    }


def serving_run(bucket: Bucket, lang: str, run: str | None) -> tuple[str, str | None]:
    """The run `predict` uses: --run, else the promoted one, else the newest successful one (and a note saying so)."""
    from stacks.runs.records import pick_run

    if run:
        return pick_run(bucket, lang, run, succeeded=True), None
    current = read_current(bucket, lang)
    if current:
        return current["run_id"], None
    run_id = pick_run(bucket, lang, None, succeeded=True)
    return (
        run_id,
        f"no promoted model for {lang}: using the newest successful run {run_id} (trainctl promote {lang} RUN)",
    )
