"""Finished runs written straight into a local bucket folder: status, metrics, predictions."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from trainer.runfiles.status_file import RunStatus


def write(root: Path, key: str, data) -> None:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())


def fake_run(root: Path, lang: str, run_id: str, *, f1: dict[str, float], state: str = "SUCCEEDED",
             rows: list[tuple[int, str, str, str]] | None = None, tfidf: float = 0.7) -> None:
    """A classifier run of `lang` with per-label F1 `f1`, scored on `rows` (row_id, text, true, predicted)."""
    labels = sorted(f1)
    write(root, f"{lang}/runs/{run_id}/status.json",
          RunStatus(run_id=run_id, lang=lang, env="local", state=state, stage="done",
                    started_at="2026-01-01T10:00:00+00:00", finished_at="2026-01-01T10:05:00+00:00").to_json())
    if state != "SUCCEEDED":
        return
    per = {label: {"precision": v, "recall": v, "f1": v, "support": 3, "threshold": None} for label, v in f1.items()}
    write(root, f"{lang}/runs/{run_id}/metrics.json", {
        "run_id": run_id, "lang": lang, "labels": labels, "multi_label": False, "per_label": per,
        "macro_f1": sum(f1.values()) / len(f1), "micro_f1": 0.5, "accuracy": 0.5, "rows": {"scores": "valid"},
        "baseline_tfidf": {"macro_f1": tfidf, "per_label": {l: {**per[l], "f1": tfidf} for l in labels}},
        "baseline": {"macro_f1": 0.2}, "n_train": 30, "n_valid": len(rows or []), "duration_s": 12.0,
        "history": [{"stage": "classifier", "epoch": 1, "train_loss": 1.0, "valid_loss": 0.9, "accuracy": 0.5}],
        "base_lm": None, "split": {"source": "stratified", "duplicates_dropped": 0}})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["row_id", "split", "text", "true_labels", "pred_labels", *(f"prob_{l}" for l in labels)])
    for row_id, text, true, pred in rows or []:
        writer.writerow([row_id, "valid", text, true, pred, *(0.9 if l == pred else 0.1 for l in labels)])
    write(root, f"{lang}/runs/{run_id}/valid_predictions.csv", out.getvalue().encode())
    write(root, f"{lang}/runs/{run_id}/log.txt", b"2026-01-01T10:00:00Z == stage classifier (1 epochs)\n"
                                                 b"2026-01-01T10:05:00Z SUCCEEDED in 5m\n")
