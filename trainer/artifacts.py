"""The end of a run (rank 0): evaluate on the validation rows, then upload every artifact, metrics.json last."""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import os
import platform
import sys
import time

import fastai
import numpy as np
import torch

from trainer import metrics as M
from trainer.classification import ensemble, plots
from trainer.classification.baseline import tfidf_baseline
from trainer.lm import store
from trainer.runs import BWD_MODEL
from trainer.text.loaders import classifier_dataloaders, raw_text_dataloaders


def _probs(learn, dl) -> np.ndarray:
    probs, _ = learn.get_preds(dl=dl)  # reordered to the dataset's row order
    return probs.float().numpy()


def _model_probs(run, learn, dls, tokens) -> tuple[np.ndarray, np.ndarray]:
    """(validation probs, probs of the scored rows: test rows when there are, else validation)."""
    valid = _probs(learn, dls.valid)
    if not run.test_idx:
        return valid, valid
    test_dl = classifier_dataloaders(tokens, run.data.labels, multi_label=run.data.multi_label,
                                     label_names=run.data.label_names, splits=(run.train_idx, run.test_idx),
                                     bs=run.a.bs, seq_len=run.a.seq_len).valid
    return valid, _probs(learn, test_dl)


def _predictions_csv(run, rows: list[int], split: str, probs, pred) -> bytes:
    labels = run.data.label_names
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["row_id", "split", "text", "true_labels", "pred_labels", *[f"prob_{l}" for l in labels]])
    for n, i in enumerate(rows):
        w.writerow([run.data.row_ids[i], split, run.data.texts[i], ";".join(run.data.labels[i]),
                    ";".join(l for l, p in zip(labels, pred[n]) if p), *[f"{p:.4f}" for p in probs[n]]])
    return out.getvalue().encode()


def base_lm_record(run) -> dict | None:
    """Which base LM the classifier was fine-tuned from: id, hash of its meta.json, size, source."""
    lm = run.base
    if lm is None:
        return None
    meta = run.bucket.read_bytes(store.prefix(run.a.lang, lm.id) + "meta.json")
    return {"id": lm.id, "meta_sha256": hashlib.sha256(meta).hexdigest(), "source": lm.source, "tokens": lm.tokens,
            "perplexity": lm.perplexity, "small": lm.small}


def evaluate(run) -> dict:
    """Thresholds are tuned on the validation rows only; the reported figures are test figures
    when the data has a test split, else validation figures (tuned and at 0.5, side by side)."""
    run.stage("evaluating")
    labels, multi = run.data.label_names, run.data.multi_label
    allow_empty = run.data.has_unlabelled
    decide = functools.partial(M.decide, allow_empty=allow_empty)
    targets = np.array([[int(l in row) for l in labels] for row in run.data.labels])
    valid_probs, probs = _model_probs(run, run.learn, run.dls, run.clf_tokens)
    thresholds = M.choose_thresholds(valid_probs, targets[run.valid_idx]) if multi else None
    valid = M.score(decide(valid_probs, multi_label=multi, thresholds=thresholds), targets[run.valid_idx],
                    labels, thresholds)
    extra: dict = {}
    if run.test_idx:
        scored, split = run.test_idx, "test"
        extra["valid"] = {**valid, "rows": {"thresholds": "valid", "scores": "valid"}}
    else:
        scored, split = run.valid_idx, "valid"
        if multi:
            half = np.full(len(labels), 0.5)
            extra["at_threshold_0_5"] = {**M.score(decide(probs, multi_label=True, thresholds=half),
                                                   targets[scored], labels, half),
                                         "rows": {"thresholds": None, "scores": "valid"}}
    pred = decide(probs, multi_label=multi, thresholds=thresholds)
    result = M.score(pred, targets[scored], labels, thresholds)
    run.confusion = (targets[scored].argmax(axis=1), pred.argmax(axis=1))
    rows = {"fit": "train", "thresholds": "valid" if multi else None, "scores": split}
    if run.bwd is not None:
        extra.update({name: {**figures, "rows": rows} for name, figures in ensemble.figures(
            (valid_probs, probs), _model_probs(run, run.bwd.learn, run.bwd.dls, run.bwd.tokens),
            valid_targets=targets[run.valid_idx], scored_targets=targets[scored], labels=labels, multi_label=multi,
            allow_empty=allow_empty).items()})
    baseline = M.majority_baseline(targets[run.train_idx], targets[scored], labels)
    tfidf = tfidf_baseline(run.data.texts, targets, train_idx=run.train_idx, valid_idx=run.valid_idx,
                           test_idx=run.test_idx or None, multi_label=multi, labels=labels, seed=run.a.seed,
                           allow_empty=allow_empty)
    run.predictions = {"valid_predictions.csv": _predictions_csv(
        run, run.valid_idx, "valid", valid_probs, decide(valid_probs, multi_label=multi, thresholds=thresholds))}
    if run.test_idx:
        run.predictions["test_predictions.csv"] = _predictions_csv(run, scored, split, probs, pred)
    tuned = " (thresholds tuned on valid)" if multi else ""
    run.log.line(f"{split}: macro-F1 {result['macro_f1']:.3f}{tuned}, micro-F1 {result['micro_f1']:.3f}, "
                 f"accuracy {result['accuracy']:.3f} (majority baseline macro-F1 {baseline['macro_f1']:.3f})"
                 + (f"; at threshold 0.5 macro-F1 {extra['at_threshold_0_5']['macro_f1']:.3f}"
                    if "at_threshold_0_5" in extra else ""))
    if run.bwd is not None:
        run.log.line(ensemble.summary(result, extra))
    run.log.line(f"TF-IDF baseline on the same rows: macro-F1 {tfidf['macro_f1']:.3f} "
                 f"(model {result['macro_f1'] - tfidf['macro_f1']:+.3f}), fitted in {tfidf['fit_s']:.1f}s")
    return {"labels": labels, "multi_label": multi, "allow_empty": allow_empty, "tokenizer": run.tokenizer.id,
            "bidirectional": run.bwd is not None,
            "base_lm": base_lm_record(run), **result, "rows": rows, **extra,
            "baseline": {**baseline, "rows": {"fit": "train", "scores": split}},
            "baseline_tfidf": {**tfidf, "rows": rows},
            "split": {"source": run.splits.source, "duplicates_dropped": run.splits.duplicates_dropped},
            "n_train": len(run.train_idx), "n_valid": len(run.valid_idx), "n_test": len(run.test_idx),
            "unlabelled": run.domain_info.record() if run.domain_info is not None else None}


def upload(run, result: dict, started: float) -> None:
    a = run.a
    run.stage("uploading")
    put = run.put
    # model.pth predicts raw strings: export with the tokenizer pipeline, not the cached ids.
    exports = [("model.pth", run.learn, run.dls, False)]
    if run.bwd is not None:  # trainctl predict averages the two when both are there
        exports.append((BWD_MODEL, run.bwd.learn, run.bwd.dls, True))
    for name, learn, dls, backwards in exports:
        learn.dls = raw_text_dataloaders(dls, run.tokenizer, run.ft_vocab, run.data.label_names,
                                         run.data.multi_label, scratch=run.work, backwards=backwards)
        learn.export(run.work / name)
        learn.dls = dls
        put(run.work / name, name)
    for name, table in run.predictions.items():
        put(table, name)
    plot = plots.history(run.history, run.work / "history.png")
    if plot:
        put(plot, "plots/history.png")
    put(plots.per_label_f1(result, run.work / "per_label_f1.png"), "plots/per_label_f1.png")
    if not run.data.multi_label:
        true_idx, pred_idx = run.confusion
        put(plots.confusion(true_idx, pred_idx, result["labels"], run.work / "confusion.png", result["rows"]["scores"]),
            "plots/confusion_matrix.png")
    meta = {"args": vars(a), "data_hash": run.data_hash, "arch": run.arch, "python": sys.version.split()[0],
            "torch": torch.__version__, "fastai": fastai.__version__, "platform": platform.platform(),
            "device": str(run.ctx.device), "precision": run.precision, "world_size": run.ctx.world,
            "image": os.environ.get("TRAINSTACK_IMAGE"), "base_lm": base_lm_record(run)}
    put(json.dumps(meta, indent=2, default=str).encode(), "metadata/trainer.json")
    metrics = {"run_id": a.run_id, "lang": a.lang, **result, "duration_s": round(time.time() - started, 1),
               "history": run.history}
    # metrics.json last: its presence means every other artifact is in place.
    put(json.dumps(metrics, indent=2).encode(), "metrics.json")
