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


def fake_run(
    root: Path,
    lang: str,
    run_id: str,
    *,
    f1: dict[str, float],
    state: str = "SUCCEEDED",
    rows: list[tuple[int, str, str, str]] | None = None,
    tfidf: float = 0.7,
) -> None:
    """A classifier run of `lang` with per-label F1 `f1`, scored on `rows` (row_id, text, true, predicted)."""
    labels = sorted(f1)
    write(
        root,
        f"{lang}/runs/{run_id}/status.json",
        RunStatus(
            run_id=run_id,
            lang=lang,
            env="local",
            state=state,
            stage="done",
            started_at="2026-01-01T10:00:00+00:00",
            finished_at="2026-01-01T10:05:00+00:00",
        ).to_json(),
    )
    if state != "SUCCEEDED":
        return
    per = {label: {"precision": v, "recall": v, "f1": v, "support": 3, "threshold": None} for label, v in f1.items()}
    write(
        root,
        f"{lang}/runs/{run_id}/metrics.json",
        {
            "run_id": run_id,
            "lang": lang,
            "labels": labels,
            "multi_label": False,
            "per_label": per,
            "macro_f1": sum(f1.values()) / len(f1),
            "micro_f1": 0.5,
            "accuracy": 0.5,
            "rows": {"scores": "valid"},
            "baseline_tfidf": {"macro_f1": tfidf, "per_label": {l: {**per[l], "f1": tfidf} for l in labels}},
            "baseline": {"macro_f1": 0.2},
            "n_train": 30,
            "n_valid": len(rows or []),
            "duration_s": 12.0,
            "history": [{"stage": "classifier", "epoch": 1, "train_loss": 1.0, "valid_loss": 0.9, "accuracy": 0.5}],
            "base_lm": None,
            "split": {"source": "stratified", "duplicates_dropped": 0},
        },
    )
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["row_id", "split", "text", "true_labels", "pred_labels", *(f"prob_{l}" for l in labels)])
    for row_id, text, true, pred in rows or []:
        writer.writerow([row_id, "valid", text, true, pred, *(0.9 if l == pred else 0.1 for l in labels)])
    write(root, f"{lang}/runs/{run_id}/valid_predictions.csv", out.getvalue().encode())
    write(
        root,
        f"{lang}/runs/{run_id}/log.txt",
        b"2026-01-01T10:00:00Z == stage classifier (1 epochs)\n2026-01-01T10:05:00Z SUCCEEDED in 5m\n",
    )


TRACKED_IMAGE = "europe-west4-docker.pkg.dev/p/trainstack/trainer:0123abc"


def utc_ms(clock: str) -> int:
    """A time of tracked_run's day (2026-11-27, UTC) in ms, as MLflow stores it."""
    from datetime import datetime

    return int(datetime.fromisoformat(f"2026-11-27T{clock}+00:00").timestamp() * 1000)


TRACKED_LOG = """2026-11-27T10:00:05Z run {run_id} ({lang}, env dev)
2026-11-27T10:05:00Z lm_finetune [1/1] epoch 1/1  train_loss 4.0000  valid_loss 3.9000
2026-11-27T10:10:00Z classifier [1/2] epoch 1/2  train_loss 0.7000  macro_f1@0.5 0.5000
2026-11-27T10:14:00Z classifier [2/2] epoch 2/2  train_loss 0.6000  valid_loss 0.6500
2026-11-27T10:14:30Z interrupted (SIGTERM): checkpoint saved; the same run id resumes from it
2026-11-27T10:20:00Z classifier [2/2] epoch 2/2  train_loss 0.5000  valid_loss 0.6000
2026-11-27T10:30:00Z SUCCEEDED in 30m
"""


def tracked_run(root: Path, lang: str, run_id: str, *, n_test: int = 0, git_sha: str = "0123abc") -> None:
    """A finished gcp classifier run with everything the tracker mirrors besides its figures: epoch lines in
    log.txt (epoch 2 ran twice: a preemption), machine, Spot placements and cost, the image, the commit, a
    base LM published by a pretraining run, validation texts, and a model.pth of bytes (never loaded)."""
    folder = f"{lang}/runs/{run_id}/"
    write(
        root,
        folder + "status.json",
        RunStatus(
            run_id=run_id,
            lang=lang,
            env="dev",
            state="SUCCEEDED",
            stage="done",
            job="classifier",
            started_at="2026-11-27T10:00:00+00:00",
            finished_at="2026-11-27T10:30:00+00:00",
        ).to_json(),
    )
    history = [
        {"stage": "lm_finetune", "phase": "1/1", "epoch": 1, "train_loss": 4.0, "valid_loss": 3.9},
        {"stage": "classifier", "phase": "1/2", "epoch": 1, "train_loss": 0.7, "macro_f1@0.5": 0.5},
        {"stage": "classifier", "phase": "2/2", "epoch": 2, "train_loss": 0.5, "valid_loss": 0.6},
    ]
    write(
        root,
        folder + "metrics.json",
        {
            "run_id": run_id,
            "lang": lang,
            "job": "classifier",
            "labels": ["a", "b c"],
            "multi_label": False,
            "macro_f1": 0.8,
            "micro_f1": 0.85,
            "accuracy": 0.9,
            "kept": "classifier",
            "per_label": {"a": {"f1": 0.7}, "b c": {"f1": 0.9}},
            "n_train": 30,
            "n_valid": 10,
            "n_test": n_test,
            "rows": {"scores": "test" if n_test else "valid"},
            "tokenizer": "fastai-spacy-blank-v1",
            "base_lm": {"id": "pt-0123456789ab", "source": "pretrain", "tokens": 1_000_000},
            "duration_s": 1800.0,
            "history": history,
        },
    )
    write(
        root,
        folder + "metadata/trainer.json",
        {
            "args": {"epochs_clf": 2, "lr": 0.01, "bucket": "x"},
            "data_hash": "d1e2f3a4b5c6d7e8",
            "device": "cuda:0",
            "image": TRACKED_IMAGE,
            "torch": "2.5.1",
            "fastai": "2.8.0",
        },
    )
    write(
        root,
        folder + "metadata/trainctl.json",
        {
            "env": "dev",
            "lang": lang,
            "run_id": run_id,
            "git_sha": git_sha,
            "target": "gcp",
            "machine_type": "g2-standard-8",
            "gpu": {"type": "nvidia-l4", "count": 1},
            "spot": True,
            "nodes": 1,
            "image": TRACKED_IMAGE,
            "zone": "europe-west4-a",
            "region": "europe-west4",
            "cost_estimate": {"per_hour": 0.35, "spot": True},
        },
    )
    write(
        root,
        folder + "metadata/placements.json",
        {
            "placements": [
                {"zone": "europe-west4-a", "ran": True, "outcome": "preempted"},
                {"zone": "europe-west4-b", "ran": True, "outcome": "succeeded"},
            ],
            "preemptions": [{"zone": "europe-west4-a", "lost_s": 60.0}],
            "capacity_wait_s": 30.0,
        },
    )
    write(
        root,
        folder + "metadata/cost.json",
        {
            "machine_type": "g2-standard-8",
            "gpu_type": "nvidia-l4",
            "gpu_count": 1,
            "spot": True,
            "nodes": 1,
            "vm_boots": 2,
            "billed_vm_s": 1800,
            "vm_per_hour": 0.35,
            "est_cost": 0.175,
            "cost_note": None,
        },
    )
    write(root, folder + "log.txt", TRACKED_LOG.format(run_id=run_id, lang=lang).encode())
    write(
        root,
        folder + "valid_predictions.csv",
        b"row_id,split,text,true_labels,pred_labels,prob_a,prob_b c\n"
        b'1,valid,un premier texte,a,a,0.9,0.1\n2,valid,"un second, texte",b c,b c,0.2,0.8\n',
    )
    write(root, folder + "model.pth", b"model")
    write(
        root,
        f"{lang}/lm/pt-0123456789ab/meta.json",
        {
            "id": "pt-0123456789ab",
            "source": "pretrain",
            "tokenizer": "fastai-spacy-blank-v1",
            "arch": {},
            "vocab_size": 10,
            "run_id": "20261126-090000-beef",
            "created_at": "2026-11-26T09:30:00Z",
        },
    )
