"""report.html: one run on one self-contained page (images inline), rendered from the run's folder.

The trainer writes it at upload (before metrics.json, from the figures in memory); trainctl
renders it again once the run's cost is recorded, and `trainctl runs show RUN --report FILE`
renders it anywhere. Stdlib only: the operator side imports it.
"""

from __future__ import annotations

import base64
import html
import json
import re

from trainer.runfiles.keys import PLACEMENTS_META, run_key
from trainer.runfiles.metrics_file import RunMetrics
from trainer.runfiles.placements import placements_summary
from trainer.runfiles.readers import read_json, read_metrics, scored_predictions
from trainer.runfiles.restarts import read_restarts, restart_place
from trainer.runfiles.status_file import read_status
from trainer.storage import Bucket

PLOTS = (
    ("plots/per_label_f1.png", "Per-label F1: model and TF-IDF on the same rows"),
    ("plots/confusion_matrix.png", "Confusion matrix"),
    ("plots/history.png", "Training history, one panel per stage"),
)
MISTAKES = 10
TEXT_COLUMNS = ("text", "true", "predicted")  # left-aligned, wrapped
TEXT_CHARS = 400
# log lines that make the timeline: stages, resumes, interruptions, queueing, the end
TIMELINE = re.compile(
    r"== stage |resume|interrupt|preempt|queued|SUCCEEDED|FAILED|restarting|checkpoint: .* finished"
    r"|spot market"
)
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0} td,th{padding:.25em .7em;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left} th{background:#f6f6f6} .good{color:#17692f} .bad{color:#a4161a}
.muted{color:#666} img{max-width:100%;border:1px solid #eee} pre{background:#f6f6f6;padding:.6em;overflow-x:auto}
td.text,th.text{text-align:left;max-width:520px;white-space:normal} .kv td{text-align:left}
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _num(value, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _read_json(bucket: Bucket, key: str):
    try:
        return json.loads(bucket.read_bytes(key)) if bucket.exists(key) else None
    except ValueError:
        return None


def _table(headers: list[str] | None, rows: list[list[str]], cls: str = "") -> str:
    head = (
        "<thead><tr>"
        + "".join(f'<th class="{"text" if h in TEXT_COLUMNS else ""}">{_e(h)}</th>' for h in headers)
        + "</tr></thead>"
        if headers
        else ""
    )
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f'<table class="{cls}">{head}<tbody>{body}</tbody></table>'


def _td(value, cls: str = "") -> str:
    return f'<td class="{cls}">{_e(value)}</td>' if cls else f"<td>{_e(value)}</td>"


def _kv(pairs: list[tuple[str, object]]) -> str:
    return _table(None, [[_td(k), _td(v)] for k, v in pairs if v not in (None, "")], "kv")


def per_label_section(m: RunMetrics) -> str:
    tfidf, majority = m.baseline_tfidf, m.baseline
    per_majority = bool(majority and majority.per_label)
    rows = []
    for label in m.labels:
        f = m.model.per_label[label]
        t = tfidf.per_label.get(label) if tfidf else None
        b = majority.per_label.get(label) if majority else None
        delta = f.f1 - t.f1 if t else None
        rows.append(
            [
                _td(label),
                _td(f.support),
                _td(_num(f.precision)),
                _td(_num(f.recall)),
                _td(_num(f.f1)),
                _td("argmax" if f.threshold is None else _num(f.threshold, 2)),
                _td(_num(t.f1) if t else ""),
                _td(f"{delta:+.3f}" if delta is not None else "", "good" if (delta or 0) >= 0 else "bad"),
                *([_td(_num(b.f1) if b else "")] if per_majority else []),
            ]
        )
    macro = [
        _td("macro-F1"),
        _td(""),
        _td(""),
        _td(""),
        _td(_num(m.model.macro_f1)),
        _td(""),
        _td(_num(tfidf.macro_f1) if tfidf else ""),
        _td(f"{m.model.macro_f1 - tfidf.macro_f1:+.3f}" if tfidf else ""),
        *([_td(_num(majority.macro_f1) if majority else "")] if per_majority else []),
    ]
    return _table(
        [
            "label",
            "support",
            "precision",
            "recall",
            "F1",
            "threshold",
            "TF-IDF F1",
            "Δ vs TF-IDF",
            *(["majority F1"] if per_majority else []),
        ],
        [*rows, macro],
    )


def kept_section(m: RunMetrics) -> str:
    """The classifier alone, its blend with TF-IDF and TF-IDF alone on the same rows, and which one was kept."""
    if m.classifier is None:
        return ""
    weight = (m.document.get("blend") or {}).get("weight")
    rows = []
    for name, figures in (
        ("classifier", m.classifier),
        (f"blend ({weight:.1f} × classifier + {1 - weight:.1f} × TF-IDF)" if weight is not None else "blend", m.blend),
        ("TF-IDF + logistic regression", m.baseline_tfidf),
    ):
        if figures is None:
            continue
        kept = name.split(" ")[0] == m.kept
        # a blend at weight 0 or 1 is one model alone: the note names it
        said = "kept: predict serves it" if m.kept_name.startswith(m.kept) else f"kept: {m.kept_name} alone"
        rows.append(
            [
                _td(name),
                _td(_num(figures.macro_f1)),
                _td(_num(figures.micro_f1)),
                _td(_num(figures.accuracy)),
                _td(said if kept else "", "good" if kept else ""),
            ]
        )
    selection = m.document.get("selection") or {}
    checked = ""
    if "confirmed" in selection:  # runs from before the check have no such keys
        checked = (
            f"; the weight was chosen on {_e(selection.get('chosen_on_rows'))} of them and checked against "
            f"TF-IDF alone on the other {_e(selection.get('checked_on_rows'))} "
            + ("(it beat it)" if selection["confirmed"] else "(it did not: TF-IDF alone kept)")
        )
    note = (
        f'<p class="muted">chosen on the validation rows by {_e(selection.get("criterion"))}: classifier '
        f"{_num(selection.get('classifier'))}, blend {_num(selection.get('blend'))}{checked}</p>"
        if selection
        else ""
    )
    return _table(["model", "macro-F1", "micro-F1", "accuracy", ""], rows) + note


def mistakes_section(bucket: Bucket, lang: str, run_id: str, m: RunMetrics) -> str:
    """The scored rows the model got most confidently wrong, with their text."""
    split = m.scored_rows or "valid"
    predictions = scored_predictions(bucket, lang, run_id, m)
    if not predictions:
        return '<p class="muted">no predictions file</p>'
    scored = []
    for row in predictions:
        true = set(filter(None, row.get("true_labels", "").split(";")))
        pred = set(filter(None, row.get("pred_labels", "").split(";")))
        if true == pred:
            continue
        probs = {label: float(row.get(f"prob_{label}") or 0) for label in m.labels}
        # how sure the model was of what it got wrong: a wrong label's probability, or a missed one's 1 - p
        wrong = max(
            [probs.get(label, 0.0) for label in pred - true] + [1 - probs.get(label, 0.0) for label in true - pred]
        )
        scored.append((wrong, row, true, pred))
    scored.sort(key=lambda item: -item[0])
    if not scored:
        return f"<p>no mistakes on the {_e(split)} rows.</p>"
    rows = [
        [
            _td(row.get("row_id")),
            _td(row.get("text", "")[:TEXT_CHARS], "text"),
            _td(";".join(sorted(true)), "text"),
            _td(";".join(sorted(pred)), "text"),
            _td(_num(wrong, 2)),
        ]
        for wrong, row, true, pred in scored[:MISTAKES]
    ]
    return (
        f"<p>{len(scored)} of the {_e(split)} rows are wrong; the {min(MISTAKES, len(scored))} the model was "
        f"surest about:</p>" + _table(["row", "text", "true", "predicted", "confidence"], rows)
    )


def _image(bucket: Bucket, lang: str, run_id: str, key: str, caption: str) -> str:
    full = run_key(lang, run_id, key)
    if not bucket.exists(full):
        return ""
    data = base64.b64encode(bucket.read_bytes(full)).decode("ascii")
    return (
        f'<figure><img alt="{_e(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


def placements_section(journal: dict | None) -> str:
    """Where the run was placed, in order, and how each placement ended (metadata/placements.json)."""
    if not journal or not journal.get("placements"):
        return ""
    rows = [
        [
            _td(p.get("zone") or "-", "text"),
            _td(p.get("applied_at") or "", "text"),
            _td(p.get("outcome") or "running", "text"),
            _td("yes" if p.get("ran") else "no", "text"),
            _td(str(p.get("preempted", 0))),
        ]
        for p in journal["placements"]
    ]
    s = placements_summary(journal)
    return (
        f"<p>{len(rows)} placement(s); {s['preemptions']} preemption(s), {s['interrupted_s']:.0f}s from a "
        f"preemption to training again, {s['capacity_wait_s']:.0f}s waiting for capacity</p>"
        + _table(["zone", "applied", "ended", "ran", "preempted"], rows)
    )


def restarts_section(records: list[dict]) -> str:
    """Each restart after a failure not the code's (metadata/restarts.json), like a placement."""
    rows = [
        [
            _td(str(r.get("restart", "")), "text"),
            _td(r.get("at") or "", "text"),
            _td(r.get("cause") or "", "text"),
            _td(restart_place(r), "text"),
        ]
        for r in records
    ]
    head = f"<p>{len(rows)} restart(s) after a failure not the code's</p>"
    return head + _table(["restart", "at", "after", "where"], rows) if records else ""


def timeline_section(log: str, status) -> str:
    lines = [line for line in log.splitlines() if TIMELINE.search(line)]
    head = f"<p>resumed {status.resumed} time(s)</p>" if status is not None else ""
    return head + (f"<pre>{_e(chr(10).join(lines[-60:]))}</pre>" if lines else '<p class="muted">no log yet</p>')


def _heading(run_id: str, lang: str, status, m: RunMetrics | None) -> list[str]:
    """The title and the line under it: state, environment, start and end, duration."""
    state = status.state if status else "UNKNOWN"
    return [
        f"<h1>Run {_e(run_id)} · {_e(lang)}</h1>",
        f'<p><b class="{"good" if state == "SUCCEEDED" else "bad" if state == "FAILED" else ""}">{_e(state)}</b>'
        + (
            f" · env {_e(status.env)} · started {_e(status.started_at)} · finished {_e(status.finished_at or '')}"
            if status
            else ""
        )
        + (f" · {m.duration_s:.0f}s" if m and m.duration_s is not None else "")
        + "</p>",
    ]


def result_section(m: RunMetrics) -> str:
    """The kept model's headline figures beside the baselines'."""
    tfidf = m.baseline_tfidf
    return f"<h2>Result on {_e(m.scored_rows)} rows</h2>" + _kv(
        [
            ("kept model", "blend with TF-IDF" if m.blended else "classifier"),
            ("macro-F1", _num(m.model.macro_f1)),
            ("TF-IDF + logistic regression macro-F1", _num(tfidf.macro_f1) if tfidf else "not computed"),
            ("model − TF-IDF", f"{m.model.macro_f1 - tfidf.macro_f1:+.3f}" if tfidf else ""),
            ("micro-F1", _num(m.model.micro_f1)),
            ("accuracy", _num(m.model.accuracy)),
            ("majority baseline macro-F1", _num(m.baseline.macro_f1) if m.baseline else ""),
            ("backward model macro-F1", _num(m.backward.macro_f1) if m.backward else ""),
            ("forward+backward ensemble macro-F1", _num(m.ensemble.macro_f1) if m.ensemble else ""),
        ]
    )


def data_section(m: RunMetrics, trainer_meta: dict) -> str:
    """The rows each figure came from, the labels and the split."""
    doc = m.document
    split = doc.get("split") or {}
    return "<h2>Data</h2>" + _kv(
        [
            ("train rows", m.n_train),
            ("validation rows", m.n_valid),
            ("test rows", m.n_test or ""),
            ("labels", ", ".join(m.labels)),
            ("multi-label", m.multi_label),
            ("split", split.get("source")),
            ("duplicates dropped", split.get("duplicates_dropped")),
            ("rows of each figure", json.dumps(doc.get("rows"))),
            ("unlabelled texts", json.dumps(doc.get("unlabelled")) if doc.get("unlabelled") else ""),
            ("data hash", trainer_meta.get("data_hash")),
        ]
    )


def classifier_sections(bucket: Bucket, lang: str, run_id: str, m: RunMetrics, trainer_meta: dict) -> list[str]:
    """Everything a run with a model to score shows: figures, plots, mistakes, base LM, data."""
    parts = [result_section(m)]
    kept = kept_section(m)
    if kept:
        parts.append("<h2>Classifier, blend, TF-IDF: what was kept</h2>" + kept)
    parts.append("<h2>Per label, against both baselines</h2>" + per_label_section(m))
    parts.append("<h2>Plots</h2>" + "".join(_image(bucket, lang, run_id, key, cap) for key, cap in PLOTS))
    parts.append("<h2>Worst mistakes</h2>" + mistakes_section(bucket, lang, run_id, m))
    base = m.document.get("base_lm")
    parts.append(
        "<h2>Base language model</h2>"
        + (
            _kv([(k, v) for k, v in base.items()])
            if isinstance(base, dict)
            else "<p>none: trained without a base LM</p>"
        )
    )
    parts.append(data_section(m, trainer_meta))
    return parts


def configuration_section(trainer_meta: dict) -> str:
    """The trainer's arguments (those set) and the environment it ran in."""
    args = trainer_meta.get("args") or {}
    environment = {
        k: trainer_meta.get(k)
        for k in ("arch", "device", "precision", "world_size", "torch", "fastai", "python", "image")
    }
    return (
        "<h2>Configuration</h2>"
        + (
            _kv(sorted((k, v) for k, v in args.items() if v not in (None, "", [])))
            if args
            else '<p class="muted">not recorded yet</p>'
        )
        + _kv(list(environment.items()))
    )


def cost_section(cost: dict | None, run_id: str) -> str:
    """metadata/cost.json without its rates, or when it will be there."""
    return "<h2>Cost</h2>" + (
        _kv([(k, v) for k, v in cost.items() if k != "rates"])
        if cost
        else '<p class="muted">recorded when the stack is torn down '
        f"(trainctl runs show {_e(run_id)} --report FILE renders it then)</p>"
    )


def render_run(bucket: Bucket, lang: str, run_id: str, *, metrics: RunMetrics | None = None) -> bytes:
    """The run's report.html; `metrics` in memory when metrics.json is not written yet (the trainer)."""
    status = read_status(bucket, lang, run_id)
    m = metrics or read_metrics(bucket, lang, run_id)
    trainer_meta = _read_json(bucket, run_key(lang, run_id, "metadata/trainer.json")) or {}
    cost = _read_json(bucket, run_key(lang, run_id, "metadata/cost.json"))
    log = bucket.read_appended(run_key(lang, run_id, "log.txt"))[0].decode("utf-8", "replace")
    parts = _heading(run_id, lang, status, m)
    if status is not None and status.error:
        parts.append(f"<h2>Error</h2><pre>{_e(status.error)}</pre>")
    if m is not None and m.model is not None:
        parts += classifier_sections(bucket, lang, run_id, m, trainer_meta)
    elif m is not None:
        parts.append(f"<h2>Result</h2>{_kv([(k, json.dumps(v)) for k, v in m.document.items() if k != 'history'])}")
    parts.append(configuration_section(trainer_meta))
    placed = placements_section(read_json(bucket, run_key(lang, run_id, PLACEMENTS_META)))
    if placed:
        parts.append("<h2>Placements</h2>" + placed)
    restarted = restarts_section(read_restarts(bucket, lang, run_id))
    if restarted:
        parts.append("<h2>Restarts</h2>" + restarted)
    parts.append("<h2>Timeline</h2>" + timeline_section(log, status))
    parts.append(cost_section(cost, run_id))
    page = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>run {_e(run_id)} ({_e(lang)})</title>'
        f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )
    return page.encode("utf-8")


def write_report(bucket: Bucket, lang: str, run_id: str, *, metrics: RunMetrics | None = None) -> None:
    bucket.write_bytes(run_key(lang, run_id, "report.html"), render_run(bucket, lang, run_id, metrics=metrics))
