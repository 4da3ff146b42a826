"""Scoring a trained classifier (rank 0): thresholds tuned on the validation rows, figures on the
scored rows (test rows when the data has them), baselines on the same rows, prediction tables."""
from __future__ import annotations

import csv
import functools
import hashlib
import io
from dataclasses import dataclass

import numpy as np

from trainer import metrics as M
from trainer.classification import ensemble
from trainer.classification.baseline import tfidf_baseline
from trainer.classification.stage import TrainedClassifier
from trainer.lm import store
from trainer.lm.store import BaseLM
from trainer.text.loaders import classifier_dataloaders


@dataclass(frozen=True)
class Evaluation:
    """metrics.json's figures (without run id and history), the prediction tables, the confusion pairs."""

    figures: dict
    predictions: dict  # file name -> CSV bytes
    confusion: tuple  # (true label index, predicted label index) per scored row


def _probs(learn, dl) -> np.ndarray:
    probs, _ = learn.get_preds(dl=dl)  # reordered to the dataset's row order
    return probs.float().numpy()


def _model_probs(rc, prep, clf: TrainedClassifier) -> tuple[np.ndarray, np.ndarray]:
    """(validation probs, probs of the scored rows: test rows when there are, else validation)."""
    valid = _probs(clf.learn, clf.dls.valid)
    if not prep.test_idx:
        return valid, valid
    data = prep.data
    test_dl = classifier_dataloaders(clf.tokens, data.labels, multi_label=data.multi_label,
                                     label_names=data.label_names, splits=(prep.train_idx, prep.test_idx),
                                     bs=rc.a.bs, seq_len=rc.a.seq_len).valid
    return valid, _probs(clf.learn, test_dl)


def _predictions_csv(data, rows: list[int], split: str, probs, pred) -> bytes:
    labels = data.label_names
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["row_id", "split", "text", "true_labels", "pred_labels", *[f"prob_{l}" for l in labels]])
    for n, i in enumerate(rows):
        w.writerow([data.row_ids[i], split, data.texts[i], ";".join(data.labels[i]),
                    ";".join(l for l, p in zip(labels, pred[n]) if p), *[f"{p:.4f}" for p in probs[n]]])
    return out.getvalue().encode()


def base_lm_record(rc, lm: BaseLM | None) -> dict | None:
    """Which base LM the classifier was fine-tuned from: id, hash of its meta.json, size, source."""
    if lm is None:
        return None
    meta = rc.bucket.read_bytes(store.prefix(rc.a.lang, lm.id) + "meta.json")
    return {"id": lm.id, "meta_sha256": hashlib.sha256(meta).hexdigest(), "source": lm.source, "tokens": lm.tokens,
            "perplexity": lm.perplexity, "small": lm.small}


def evaluate(rc, prep, base: BaseLM | None, clf: TrainedClassifier, bwd: TrainedClassifier | None) -> Evaluation:
    """Thresholds are tuned on the validation rows only; the reported figures are test figures
    when the data has a test split, else validation figures (tuned and at 0.5, side by side)."""
    rc.stage("evaluating")
    data, log = prep.data, rc.log
    labels, multi = data.label_names, data.multi_label
    allow_empty = data.has_unlabelled
    decide = functools.partial(M.decide, allow_empty=allow_empty)
    targets = np.array([[int(l in row) for l in labels] for row in data.labels])
    valid_probs, probs = _model_probs(rc, prep, clf)
    thresholds = M.choose_thresholds(valid_probs, targets[prep.valid_idx]) if multi else None
    valid = M.score(decide(valid_probs, multi_label=multi, thresholds=thresholds), targets[prep.valid_idx],
                    labels, thresholds)
    extra: dict = {}
    if prep.test_idx:
        scored, split = prep.test_idx, "test"
        extra["valid"] = {**valid, "rows": {"thresholds": "valid", "scores": "valid"}}
    else:
        scored, split = prep.valid_idx, "valid"
        if multi:
            half = np.full(len(labels), 0.5)
            extra["at_threshold_0_5"] = {**M.score(decide(probs, multi_label=True, thresholds=half),
                                                   targets[scored], labels, half),
                                         "rows": {"thresholds": None, "scores": "valid"}}
    pred = decide(probs, multi_label=multi, thresholds=thresholds)
    result = M.score(pred, targets[scored], labels, thresholds)
    confusion = (targets[scored].argmax(axis=1), pred.argmax(axis=1))
    rows = {"fit": "train", "thresholds": "valid" if multi else None, "scores": split}
    if bwd is not None:
        extra.update({name: {**figures, "rows": rows} for name, figures in ensemble.figures(
            (valid_probs, probs), _model_probs(rc, prep, bwd),
            valid_targets=targets[prep.valid_idx], scored_targets=targets[scored], labels=labels, multi_label=multi,
            allow_empty=allow_empty).items()})
    baseline = M.majority_baseline(targets[prep.train_idx], targets[scored], labels)
    tfidf = tfidf_baseline(data.texts, targets, train_idx=prep.train_idx, valid_idx=prep.valid_idx,
                           test_idx=prep.test_idx or None, multi_label=multi, labels=labels, seed=rc.a.seed,
                           allow_empty=allow_empty)
    predictions = {"valid_predictions.csv": _predictions_csv(
        data, prep.valid_idx, "valid", valid_probs, decide(valid_probs, multi_label=multi, thresholds=thresholds))}
    if prep.test_idx:
        predictions["test_predictions.csv"] = _predictions_csv(data, scored, split, probs, pred)
    tuned = " (thresholds tuned on valid)" if multi else ""
    log.line(f"{split}: macro-F1 {result['macro_f1']:.3f}{tuned}, micro-F1 {result['micro_f1']:.3f}, "
                 f"accuracy {result['accuracy']:.3f} (majority baseline macro-F1 {baseline['macro_f1']:.3f})"
                 + (f"; at threshold 0.5 macro-F1 {extra['at_threshold_0_5']['macro_f1']:.3f}"
                    if "at_threshold_0_5" in extra else ""))
    if bwd is not None:
        log.line(ensemble.summary(result, extra))
    log.line(f"TF-IDF baseline on the same rows: macro-F1 {tfidf['macro_f1']:.3f} "
                 f"(model {result['macro_f1'] - tfidf['macro_f1']:+.3f}), fitted in {tfidf['fit_s']:.1f}s")
    figures = {"labels": labels, "multi_label": multi, "allow_empty": allow_empty, "tokenizer": prep.tokenizer.id,
               "bidirectional": bwd is not None,
               "base_lm": base_lm_record(rc, base), **result, "rows": rows, **extra,
               "baseline": {**baseline, "rows": {"fit": "train", "scores": split}},
               "baseline_tfidf": {**tfidf, "rows": rows},
               "split": {"source": prep.splits.source, "duplicates_dropped": prep.splits.duplicates_dropped},
               "n_train": len(prep.train_idx), "n_valid": len(prep.valid_idx), "n_test": len(prep.test_idx),
               "unlabelled": prep.domain_info.record() if prep.domain_info is not None else None}
    return Evaluation(figures, predictions, confusion)
