"""Scoring a trained classifier (rank 0): thresholds tuned on the validation rows, figures on the
scored rows (test rows when the data has them), baselines on the same rows, prediction tables."""
from __future__ import annotations

import csv
import functools
import hashlib
import io
from dataclasses import dataclass

import numpy as np

from trainer.classification import metrics as M
from trainer.classification import blend, ensemble
from trainer.classification.baseline import TfidfSpec, fit_tfidf, tfidf_baseline
from trainer.stages.classifier import TrainedClassifier
from trainer.lm import store
from trainer.lm.store import BaseLM
from trainer.runfiles.metrics_file import kept_model_name
from trainer.text.loaders import classifier_dataloaders


@dataclass(frozen=True)
class Evaluation:
    """metrics.json's figures (without run id and history), the prediction tables, the confusion pairs."""

    figures: dict
    predictions: dict  # file name -> CSV bytes
    confusion: tuple  # (true label index, predicted label index) per scored row
    tfidf_files: dict | None = None  # tfidf.json + tfidf.npz when the kept model is the blend


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


def _predictions_csv(data, rows: list[int], split: str, probs, pred, clf_probs=None) -> bytes:
    """One row per scored text: what the run kept (probabilities and labels), and the classifier's own
    probabilities beside them when the kept model is the blend."""
    labels = data.label_names
    out = io.StringIO()
    w = csv.writer(out)
    extra = [f"model_prob_{l}" for l in labels] if clf_probs is not None else []
    w.writerow(["row_id", "split", "text", "true_labels", "pred_labels", *[f"prob_{l}" for l in labels], *extra])
    for n, i in enumerate(rows):
        w.writerow([data.row_ids[i], split, data.texts[i], ";".join(data.labels[i]),
                    ";".join(l for l, p in zip(labels, pred[n]) if p), *[f"{p:.4f}" for p in probs[n]],
                    *([f"{p:.4f}" for p in clf_probs[n]] if clf_probs is not None else [])])
    return out.getvalue().encode()


def probe_figures(probe: dict | None, targets: np.ndarray, valid_idx: list[int], scored: list[int], labels: list[str], *,
                  multi: bool, split: str, choose, decide) -> dict | None:
    """The linear probe the classifier's head started from, scored like the classifier (None: not recorded)."""
    if probe is None:
        return None
    probs = probe["test_probs"] if split == "test" else probe["valid_probs"]
    if probs is None:
        return None
    thresholds = choose(probe["valid_probs"], targets[valid_idx]) if multi else None
    figures = M.score(decide(np.asarray(probs), multi_label=multi, thresholds=thresholds), targets[scored], labels,
                      thresholds)
    return {**figures, "c": probe["c"], "cv_loss": probe["cv_loss"], "valid_loss": probe["valid_loss"],
            "rows": {"fit": "train", "c": "train (cross-validated)", "thresholds": "valid" if multi else None,
                     "scores": split}}


def base_lm_record(rc, lm: BaseLM | None) -> dict | None:
    """Which base LM the classifier was fine-tuned from: id, hash of its meta.json, size, source."""
    if lm is None:
        return None
    meta = rc.bucket.read_bytes(store.prefix(rc.a.lang, lm.id) + "meta.json")
    return {"id": lm.id, "meta_sha256": hashlib.sha256(meta).hexdigest(), "source": lm.source, "tokens": lm.tokens,
            "perplexity": lm.perplexity, "small": lm.small}


def _checked(selection: dict) -> str:
    """How the weight was checked (trainer.classification.blend): on the validation rows it was not chosen on."""
    w, chosen_on, checked_on = selection["chosen_weight"], selection["chosen_on_rows"], selection["checked_on_rows"]
    if w == 0:
        return f"weight 0 (TF-IDF alone) chosen on {chosen_on} rows"
    verdict = "it beat TF-IDF alone there" if selection["confirmed"] else "it did not beat TF-IDF alone there: TF-IDF kept"
    return f"weight {w:.1f} chosen on {chosen_on} rows, checked on the other {checked_on}: {verdict}"


def evaluate(rc, prep, base: BaseLM | None, clf: TrainedClassifier, bwd: TrainedClassifier | None) -> Evaluation:
    """Thresholds, the blend weight and the kept model are chosen on the validation rows only; the
    reported figures are test figures when the data has a test split, else validation figures
    (tuned and at 0.5, side by side)."""
    rc.stage("evaluating")
    a, data, log = rc.a, prep.data, rc.log
    labels, multi = data.label_names, data.multi_label
    allow_empty = data.has_unlabelled
    decide = functools.partial(M.decide, allow_empty=allow_empty)
    choose = functools.partial(M.choose_thresholds, policy=a.thresholds)
    targets = np.array([[int(l in row) for l in labels] for row in data.labels])
    valid_t = targets[prep.valid_idx]
    valid_probs, probs = _model_probs(rc, prep, clf)
    thresholds = choose(valid_probs, valid_t) if multi else None
    extra: dict = {}
    scored, split = (prep.test_idx, "test") if prep.test_idx else (prep.valid_idx, "valid")
    pred = decide(probs, multi_label=multi, thresholds=thresholds)
    result = M.score(pred, targets[scored], labels, thresholds)
    rows = {"fit": "train", "thresholds": "valid" if multi else None, "scores": split}
    # What the blend starts from: the classifier predict serves (the ensemble's probabilities for a bidirectional run).
    clf_valid, clf_scored = valid_probs, probs
    if bwd is not None:
        bwd_probs = _model_probs(rc, prep, bwd)
        extra.update({name: {**figures, "rows": rows} for name, figures in ensemble.figures(
            (valid_probs, probs), bwd_probs, valid_targets=valid_t, scored_targets=targets[scored], labels=labels,
            multi_label=multi, allow_empty=allow_empty, threshold_policy=a.thresholds).items()})
        clf_valid, clf_scored = (valid_probs + bwd_probs[0]) / 2, (probs + bwd_probs[1]) / 2
    baseline = M.majority_baseline(targets[prep.train_idx], targets[scored], labels)
    tfidf_model = fit_tfidf(data.texts, targets, train_idx=prep.train_idx, valid_idx=prep.valid_idx,
                            multi_label=multi, labels=labels, spec=TfidfSpec.for_language(a.lang_code or a.lang),
                            seed=a.seed, allow_empty=allow_empty, threshold_policy=a.thresholds)
    tfidf = tfidf_baseline(data.texts, targets, train_idx=prep.train_idx, valid_idx=prep.valid_idx,
                           test_idx=prep.test_idx or None, multi_label=multi, labels=labels, model=tfidf_model,
                           allow_empty=allow_empty)
    tfidf_valid = tfidf_model.probabilities([data.texts[i] for i in prep.valid_idx])
    choice = blend.choose(clf_valid, tfidf_valid, valid_t, labels, multi_label=multi, threshold_policy=a.thresholds)
    best_w = choice.valid["blend_weight"]
    blend_thr = (choose(blend.mix(best_w, clf_valid, tfidf_valid), valid_t) if multi else None)
    tfidf_scored = tfidf_model.probabilities([data.texts[i] for i in scored])
    blend_probs = blend.mix(best_w, clf_scored, tfidf_scored)
    blend_figures = {**M.score(decide(blend_probs, multi_label=multi, thresholds=blend_thr), targets[scored], labels,
                               blend_thr), "weight": best_w, "rows": rows}
    kept = choice.kept if a.blend_tfidf else blend.CLASSIFIER
    forward_figures = {**result, "rows": rows}
    # the classifier predict serves without the blend: the ensemble for a bidirectional run
    classifier_figures = dict(extra["ensemble"]) if bwd is not None else {**result, "rows": rows}
    tfidf_files = None
    if kept == blend.BLEND:
        result = {k: v for k, v in blend_figures.items() if k not in ("weight", "rows")}
        tfidf_files = tfidf_model.save()
    kept_valid_probs = choice.mix(clf_valid, tfidf_valid) if kept == blend.BLEND else valid_probs
    kept_probs = blend_probs if kept == blend.BLEND else probs
    kept_thr = blend_thr if kept == blend.BLEND else thresholds
    kept_pred = decide(kept_probs, multi_label=multi, thresholds=kept_thr)
    if prep.test_idx:  # the kept model on its validation rows, beside its test figures
        extra["valid"] = {**M.score(decide(kept_valid_probs, multi_label=multi, thresholds=kept_thr), valid_t, labels,
                                    kept_thr), "rows": {"thresholds": "valid", "scores": "valid"}}
    elif multi:  # the kept model at 0.5, beside its tuned thresholds
        half = np.full(len(labels), 0.5)
        extra["at_threshold_0_5"] = {**M.score(decide(kept_probs, multi_label=True, thresholds=half), targets[scored],
                                               labels, half), "rows": {"thresholds": None, "scores": "valid"}}
    confusion = (targets[scored].argmax(axis=1), kept_pred.argmax(axis=1))
    model_cols = (lambda p: p) if kept == blend.BLEND else (lambda p: None)
    predictions = {"valid_predictions.csv": _predictions_csv(
        data, prep.valid_idx, "valid", kept_valid_probs, decide(kept_valid_probs, multi_label=multi, thresholds=kept_thr),
        model_cols(clf_valid))}
    if prep.test_idx:
        predictions["test_predictions.csv"] = _predictions_csv(data, scored, split, kept_probs, kept_pred,
                                                               model_cols(clf_scored))
    tuned = " (thresholds tuned on valid)" if multi else ""
    log.line(f"{split}: classifier macro-F1 {forward_figures['macro_f1']:.3f}{tuned}, micro-F1 "
             f"{forward_figures['micro_f1']:.3f}, accuracy {forward_figures['accuracy']:.3f} (majority baseline "
             f"macro-F1 {baseline['macro_f1']:.3f})"
             + (f"; at threshold 0.5 macro-F1 {extra['at_threshold_0_5']['macro_f1']:.3f}"
                if "at_threshold_0_5" in extra else ""))
    if bwd is not None:
        log.line(ensemble.summary(forward_figures, extra))
    probe = probe_figures(clf.probe, targets, prep.valid_idx, scored, labels, multi=multi, split=split,
                          choose=choose, decide=decide)
    if probe is not None:
        log.line(f"{split}: the linear probe the head started from: macro-F1 {probe['macro_f1']:.3f}, micro-F1 "
                 f"{probe['micro_f1']:.3f}, accuracy {probe['accuracy']:.3f}")
    log.line(f"TF-IDF baseline on the same rows: macro-F1 {tfidf['macro_f1']:.3f}, micro-F1 {tfidf['micro_f1']:.3f} "
             f"(C={tfidf_model.c:g}), fitted in {tfidf['fit_s']:.1f}s")
    log.line(f"blend {best_w:.1f} x classifier + {1 - best_w:.1f} x TF-IDF: macro-F1 {blend_figures['macro_f1']:.3f}, "
             f"micro-F1 {blend_figures['micro_f1']:.3f}; kept: {kept_model_name(kept, best_w, times='x')}"
             + ("" if a.blend_tfidf else " (trainer.blend_tfidf is off)")
             + f" (validation log loss: classifier {choice.valid['classifier']:.4f}, blend {choice.valid['blend']:.4f}; "
               + _checked(choice.valid) + ")")
    figures = {"labels": labels, "multi_label": multi, "allow_empty": allow_empty, "tokenizer": prep.tokenizer.id,
               "bidirectional": bwd is not None,
               "base_lm": base_lm_record(rc, base), **result, "rows": rows, **extra,
               "kept": kept, "classifier": classifier_figures, "best_epoch": clf.best_epoch, "blend": blend_figures,
               "probe": probe,
               "threshold_policy": a.thresholds if multi else None,
               "selection": {"rows": "valid", "criterion": "log loss", **choice.valid},
               "baseline": {**baseline, "rows": {"fit": "train", "scores": split}},
               "baseline_tfidf": {**tfidf, "rows": rows},
               "split": {"source": prep.splits.source, "duplicates_dropped": prep.splits.duplicates_dropped},
               "n_train": len(prep.train_idx), "n_valid": len(prep.valid_idx), "n_test": len(prep.test_idx),
               "unlabelled": prep.domain_info.record() if prep.domain_info is not None else None}
    return Evaluation(figures, predictions, confusion, tfidf_files)
