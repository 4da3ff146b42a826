"""The end of a run (rank 0): evaluate on the validation rows, then upload every artifact, metrics.json last."""
from __future__ import annotations

import csv
import io
import json
import os
import platform
import sys
import time
from pathlib import Path

import fastai
import numpy as np
import torch

from trainer import metrics as M
from trainer.classification.baseline import tfidf_baseline
from trainer.text.loaders import raw_text_dataloaders


def evaluate(run) -> dict:
    run.stage("evaluating")
    probs, targs = run.learn.get_preds(ds_idx=1)
    probs = probs.float().numpy()
    labels = run.data.label_names
    if run.data.multi_label:
        targets = targs.numpy().astype(int)
        thresholds = M.choose_thresholds(probs, targets)
    else:
        targets = np.eye(len(labels), dtype=int)[targs.numpy().astype(int)]
        thresholds = None
    pred = M.decide(probs, multi_label=run.data.multi_label, thresholds=thresholds)
    result = M.score(pred, targets, labels, thresholds)
    all_targets = np.array([[int(l in row) for l in labels] for row in run.data.labels])
    baseline = M.majority_baseline(all_targets[run.train_idx], targets, labels)
    tfidf = tfidf_baseline(run.data.texts, all_targets, train_idx=run.train_idx, valid_idx=run.valid_idx,
                           multi_label=run.data.multi_label, labels=labels, seed=run.a.seed)
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["row_id", "text", "true_labels", "pred_labels", *[f"prob_{l}" for l in labels]])
    for n, i in enumerate(run.valid_idx):  # get_preds reorders to dataset order
        w.writerow([run.data.row_ids[i], run.data.texts[i], ";".join(run.data.labels[i]),
                    ";".join(l for l, p in zip(labels, pred[n]) if p), *[f"{p:.4f}" for p in probs[n]]])
    run.predictions_csv = out.getvalue().encode()
    run.log.line(f"validation: macro-F1 {result['macro_f1']:.3f}, micro-F1 {result['micro_f1']:.3f}, "
                 f"accuracy {result['accuracy']:.3f} (majority baseline macro-F1 {baseline['macro_f1']:.3f})")
    run.log.line(f"TF-IDF baseline on the same rows: macro-F1 {tfidf['macro_f1']:.3f} "
                 f"(model {result['macro_f1'] - tfidf['macro_f1']:+.3f}), fitted in {tfidf['fit_s']:.1f}s")
    rows = {"fit": "train", "thresholds": "valid" if run.data.multi_label else None, "scores": "valid"}
    return {"labels": labels, "multi_label": run.data.multi_label, **result, "baseline": baseline,
            "baseline_tfidf": {**tfidf, "rows": rows}, "rows": rows,
            "n_train": len(run.train_idx), "n_valid": len(run.valid_idx)}


def upload(run, result: dict, started: float) -> None:
    a = run.a
    run.stage("uploading")
    learn = run.learn
    # model.pth predicts raw strings: export with the tokenizer pipeline, not the cached ids.
    learn.dls = raw_text_dataloaders(run.dls, a.lang, run.ft_vocab, run.data.label_names, run.data.multi_label)
    learn.export(run.work / "model.pth")
    learn.dls = run.dls
    put = run.put
    put(run.work / "model.pth", "model.pth")
    put(run.predictions_csv, "valid_predictions.csv")
    plot = plot_history(run.history, run.work / "history.png")
    if plot:
        put(plot, "plots/history.png")
    meta = {"args": vars(a), "data_hash": run.data_hash, "arch": run.arch, "python": sys.version.split()[0],
            "torch": torch.__version__, "fastai": fastai.__version__, "platform": platform.platform(),
            "device": str(run.ctx.device), "precision": run.precision, "world_size": run.ctx.world,
            "image": os.environ.get("TRAINSTACK_IMAGE")}
    put(json.dumps(meta, indent=2, default=str).encode(), "metadata/trainer.json")
    metrics = {"run_id": a.run_id, "lang": a.lang, **result, "duration_s": round(time.time() - started, 1),
               "history": run.history}
    # metrics.json last: its presence means every other artifact is in place.
    put(json.dumps(metrics, indent=2).encode(), "metrics.json")


def plot_history(history: list[dict], path: Path) -> Path | None:
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for key in ("train_loss", "valid_loss"):
        ax.plot(range(1, len(history) + 1), [h.get(key) for h in history], label=key, marker="o")
    ax.set_xlabel("epoch (all stages)")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
