"""Scoring a trained classifier (rank 0): thresholds tuned on the validation rows, figures on the
scored rows (test rows when the data has them), baselines on the same rows, prediction tables.

Size: over 400 lines because every figure of metrics.json comes from one `Scoring` of the same rows here (the
classifier, its backward pair, the blend, the kept model, the baselines); apart, they could score different rows."""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass

import numpy as np

from trainer.classification import blend, ensemble
from trainer.classification import metrics as M
from trainer.classification.baseline import TfidfSpec, fit_tfidf, tfidf_baseline
from trainer.lm import store
from trainer.runfiles.metrics_file import kept_model_name
from trainer.stages.classifier import TrainedClassifier
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
    test_dl = classifier_dataloaders(
        clf.tokens,
        data.labels,
        multi_label=data.multi_label,
        label_names=data.label_names,
        splits=(prep.train_idx, prep.test_idx),
        bs=rc.a.bs,
        seq_len=rc.a.seq_len,
    ).valid
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
        w.writerow(
            [
                data.row_ids[i],
                split,
                data.texts[i],
                ";".join(data.labels[i]),
                ";".join(l for l, p in zip(labels, pred[n]) if p),
                *[f"{p:.4f}" for p in probs[n]],
                *([f"{p:.4f}" for p in clf_probs[n]] if clf_probs is not None else []),
            ]
        )
    return out.getvalue().encode()


@dataclass(frozen=True)
class Scoring:
    """How every model of a run is scored alike: the 0/1 label matrix, the validation rows thresholds and the
    kept model are chosen on, the scored rows (test rows when the data has them, else validation), and the one
    rule that turns probabilities into labels."""

    labels: list[str]
    multi: bool
    allow_empty: bool  # rows without a label exist: a prediction may be empty too
    policy: str  # trainer.thresholds
    targets: np.ndarray  # every row x labels
    valid_idx: list[int]
    scored: list[int]
    split: str  # "test" or "valid": the rows the figures come from

    @classmethod
    def of(cls, prep, policy: str) -> "Scoring":
        data, labels = prep.data, prep.data.label_names
        scored, split = (prep.test_idx, "test") if prep.test_idx else (prep.valid_idx, "valid")
        return cls(
            labels=labels,
            multi=data.multi_label,
            allow_empty=data.has_unlabelled,
            policy=policy,
            targets=np.array([[int(l in row) for l in labels] for row in data.labels]),
            valid_idx=prep.valid_idx,
            scored=scored,
            split=split,
        )

    @property
    def valid_targets(self) -> np.ndarray:
        return self.targets[self.valid_idx]

    @property
    def scored_targets(self) -> np.ndarray:
        return self.targets[self.scored]

    @property
    def rows(self) -> dict:
        """Which rows each step of a model used, as metrics.json records it."""
        return {"fit": "train", "thresholds": "valid" if self.multi else None, "scores": self.split}

    def thresholds(self, valid_probs: np.ndarray) -> np.ndarray | None:
        """Per-label thresholds tuned on the validation rows (multi-label; None: single-label's argmax)."""
        return M.choose_thresholds(valid_probs, self.valid_targets, policy=self.policy) if self.multi else None

    def decide(self, probs: np.ndarray, thresholds: np.ndarray | None) -> np.ndarray:
        return M.decide(probs, multi_label=self.multi, thresholds=thresholds, allow_empty=self.allow_empty)

    def score(self, probs: np.ndarray, thresholds: np.ndarray | None, targets: np.ndarray | None = None) -> dict:
        """The figures of `probs` against the scored rows (or `targets`, the rows `probs` are of)."""
        return M.score(
            self.decide(probs, thresholds), self.scored_targets if targets is None else targets, self.labels, thresholds
        )


@dataclass(frozen=True)
class Probs:
    """One model's probabilities on the validation rows and on the scored rows."""

    valid: np.ndarray
    scored: np.ndarray


@dataclass(frozen=True)
class Blended:
    """The TF-IDF baseline fitted on the run's rows, the blend chosen on the validation rows, and its figures."""

    tfidf_model: object  # trainer.classification.baseline.TfidfModel
    tfidf: dict  # the baseline's own figures
    tfidf_probs: Probs
    choice: blend.Choice
    probs: Probs  # the blend at the weight the log shows (choice.valid["blend_weight"])
    thresholds: np.ndarray | None
    figures: dict


@dataclass(frozen=True)
class Kept:
    """The model the run keeps (blend.CLASSIFIER or blend.BLEND): what predict serves and metrics.json reports."""

    name: str
    probs: Probs
    thresholds: np.ndarray | None
    figures: dict  # on the scored rows


def probe_figures(probe: dict | None, s: Scoring) -> dict | None:
    """The linear probe the classifier's head started from, scored like the classifier (None: not recorded)."""
    if probe is None:
        return None
    probs = probe["test_probs"] if s.split == "test" else probe["valid_probs"]
    if probs is None:
        return None
    figures = s.score(np.asarray(probs), s.thresholds(probe["valid_probs"]))
    return {
        **figures,
        "c": probe["c"],
        "cv_loss": probe["cv_loss"],
        "valid_loss": probe["valid_loss"],
        "rows": {
            "fit": "train",
            "c": "train (cross-validated)",
            "thresholds": "valid" if s.multi else None,
            "scores": s.split,
        },
    }


def base_lm_record(rc, lm: store.BaseLM | None) -> dict | None:
    """Which base LM the classifier was fine-tuned from: id, hash of its meta.json, size, source."""
    if lm is None:
        return None
    meta = rc.bucket.read_bytes(store.prefix(rc.a.lang, lm.id) + "meta.json")
    return {
        "id": lm.id,
        "meta_sha256": hashlib.sha256(meta).hexdigest(),
        "source": lm.source,
        "tokens": lm.tokens,
        "perplexity": lm.perplexity,
        "small": lm.small,
    }


def _checked(selection: dict) -> str:
    """How the weight was checked (trainer.classification.blend): on the validation rows it was not chosen on."""
    w, chosen_on, checked_on = selection["chosen_weight"], selection["chosen_on_rows"], selection["checked_on_rows"]
    if w == 0:
        return f"weight 0 (TF-IDF alone) chosen on {chosen_on} rows"
    verdict = (
        "it beat TF-IDF alone there" if selection["confirmed"] else "it did not beat TF-IDF alone there: TF-IDF kept"
    )
    return f"weight {w:.1f} chosen on {chosen_on} rows, checked on the other {checked_on}: {verdict}"


def bidirectional(rc, prep, bwd: TrainedClassifier, fwd: Probs, s: Scoring) -> tuple[dict, Probs]:
    """The backward model's and the ensemble's figures ({"backward", "ensemble"}), and the ensemble's
    probabilities: what predict serves of a bidirectional run, so what the blend starts from."""
    bwd_valid, bwd_scored = _model_probs(rc, prep, bwd)
    figures = {
        name: {**f, "rows": s.rows}
        for name, f in ensemble.figures(
            (fwd.valid, fwd.scored),
            (bwd_valid, bwd_scored),
            valid_targets=s.valid_targets,
            scored_targets=s.scored_targets,
            labels=s.labels,
            multi_label=s.multi,
            allow_empty=s.allow_empty,
            threshold_policy=s.policy,
        ).items()
    }
    return figures, Probs((fwd.valid + bwd_valid) / 2, (fwd.scored + bwd_scored) / 2)


def blended(a, prep, served: Probs, s: Scoring) -> Blended:
    """The TF-IDF baseline on the run's rows, and its blend with the classifier `served`, weighed on the
    validation rows (trainer.classification.blend)."""
    texts = prep.data.texts
    model = fit_tfidf(
        texts,
        s.targets,
        train_idx=prep.train_idx,
        valid_idx=prep.valid_idx,
        multi_label=s.multi,
        labels=s.labels,
        spec=TfidfSpec.for_language(a.lang_code or a.lang),
        seed=a.seed,
        allow_empty=s.allow_empty,
        threshold_policy=s.policy,
    )
    tfidf = tfidf_baseline(
        texts,
        s.targets,
        train_idx=prep.train_idx,
        valid_idx=prep.valid_idx,
        test_idx=prep.test_idx or None,
        multi_label=s.multi,
        labels=s.labels,
        model=model,
        allow_empty=s.allow_empty,
    )
    tfidf_valid = model.probabilities([texts[i] for i in prep.valid_idx])
    choice = blend.choose(
        served.valid, tfidf_valid, s.valid_targets, s.labels, multi_label=s.multi, threshold_policy=s.policy
    )
    w = choice.valid["blend_weight"]
    mixed_valid = blend.mix(w, served.valid, tfidf_valid)
    thresholds = s.thresholds(mixed_valid)
    tfidf_scored = model.probabilities([texts[i] for i in s.scored])
    mixed = Probs(mixed_valid, blend.mix(w, served.scored, tfidf_scored))
    figures = {**s.score(mixed.scored, thresholds), "weight": w, "rows": s.rows}
    return Blended(model, tfidf, Probs(tfidf_valid, tfidf_scored), choice, mixed, thresholds, figures)


def kept_model(keep_blend: bool, clf: Probs, clf_thresholds, clf_figures: dict, served: Probs, b: Blended) -> Kept:
    """The blend when the choice kept it and trainer.blend_tfidf allows it, else the forward classifier."""
    kept = b.choice.kept if keep_blend else blend.CLASSIFIER
    if kept != blend.BLEND:
        return Kept(kept, clf, clf_thresholds, clf_figures)
    figures = {k: v for k, v in b.figures.items() if k not in ("weight", "rows")}  # a model's figures only
    return Kept(kept, Probs(b.choice.mix(served.valid, b.tfidf_probs.valid), b.probs.scored), b.thresholds, figures)


def kept_beside(kept: Kept, s: Scoring, has_test: bool) -> dict:
    """The kept model's figures beside its reported ones: on its validation rows when the figures are test
    figures; at threshold 0.5 beside its tuned thresholds (multi-label, validation figures)."""
    if has_test:
        return {
            "valid": {
                **s.score(kept.probs.valid, kept.thresholds, s.valid_targets),
                "rows": {"thresholds": "valid", "scores": "valid"},
            }
        }
    if s.multi:
        half = np.full(len(s.labels), 0.5)
        return {
            "at_threshold_0_5": {**s.score(kept.probs.scored, half), "rows": {"thresholds": None, "scores": "valid"}}
        }
    return {}


def prediction_tables(prep, kept: Kept, served: Probs, s: Scoring) -> dict:
    """valid_predictions.csv (and test_predictions.csv): the kept model's, with the classifier's own
    probabilities beside a blend's."""
    data, model_cols = prep.data, (lambda p: p) if kept.name == blend.BLEND else (lambda p: None)
    tables = {
        "valid_predictions.csv": _predictions_csv(
            data,
            prep.valid_idx,
            "valid",
            kept.probs.valid,
            s.decide(kept.probs.valid, kept.thresholds),
            model_cols(served.valid),
        )
    }
    if prep.test_idx:
        tables["test_predictions.csv"] = _predictions_csv(
            data,
            s.scored,
            s.split,
            kept.probs.scored,
            s.decide(kept.probs.scored, kept.thresholds),
            model_cols(served.scored),
        )
    return tables


def log_figures(
    log,
    a,
    s: Scoring,
    forward: dict,
    extra: dict,
    baseline: dict,
    probe: dict | None,
    b: Blended,
    kept: str,
    bidirectional_run: bool,
) -> None:
    """The run log's account of the figures: the classifier, the ensemble, the probe, TF-IDF, the blend."""
    tuned = " (thresholds tuned on valid)" if s.multi else ""
    log.line(
        f"{s.split}: classifier macro-F1 {forward['macro_f1']:.3f}{tuned}, micro-F1 "
        f"{forward['micro_f1']:.3f}, accuracy {forward['accuracy']:.3f} (majority baseline "
        f"macro-F1 {baseline['macro_f1']:.3f})"
        + (
            f"; at threshold 0.5 macro-F1 {extra['at_threshold_0_5']['macro_f1']:.3f}"
            if "at_threshold_0_5" in extra
            else ""
        )
    )
    if bidirectional_run:
        log.line(ensemble.summary(forward, extra))
    if probe is not None:
        log.line(
            f"{s.split}: the linear probe the head started from: macro-F1 {probe['macro_f1']:.3f}, micro-F1 "
            f"{probe['micro_f1']:.3f}, accuracy {probe['accuracy']:.3f}"
        )
    tfidf, best_w, blend_figures, choice = b.tfidf, b.choice.valid["blend_weight"], b.figures, b.choice
    log.line(
        f"TF-IDF baseline on the same rows: macro-F1 {tfidf['macro_f1']:.3f}, micro-F1 {tfidf['micro_f1']:.3f} "
        f"(C={b.tfidf_model.c:g}), fitted in {tfidf['fit_s']:.1f}s"
    )
    log.line(
        f"blend {best_w:.1f} x classifier + {1 - best_w:.1f} x TF-IDF: macro-F1 {blend_figures['macro_f1']:.3f}, "
        f"micro-F1 {blend_figures['micro_f1']:.3f}; kept: {kept_model_name(kept, best_w, times='x')}"
        + ("" if a.blend_tfidf else " (trainer.blend_tfidf is off)")
        + f" (validation log loss: classifier {choice.valid['classifier']:.4f}, blend {choice.valid['blend']:.4f}; "
        + _checked(choice.valid)
        + ")"
    )


def evaluate(rc, prep, base: store.BaseLM | None, clf: TrainedClassifier, bwd: TrainedClassifier | None) -> Evaluation:
    """Thresholds, the blend weight and the kept model are chosen on the validation rows only; the
    reported figures are test figures when the data has a test split, else validation figures
    (tuned and at 0.5, side by side)."""
    rc.stage("evaluating")
    a, s = rc.a, Scoring.of(prep, rc.a.thresholds)
    fwd = Probs(*_model_probs(rc, prep, clf))
    thresholds = s.thresholds(fwd.valid)
    forward = {**s.score(fwd.scored, thresholds), "rows": s.rows}
    # What the blend starts from: the classifier predict serves (the ensemble's probabilities for a bidirectional run).
    extra, served = bidirectional(rc, prep, bwd, fwd, s) if bwd is not None else ({}, fwd)
    baseline = M.majority_baseline(s.targets[prep.train_idx], s.scored_targets, s.labels)
    b = blended(a, prep, served, s)
    kept = kept_model(a.blend_tfidf, fwd, thresholds, {k: v for k, v in forward.items() if k != "rows"}, served, b)
    extra.update(kept_beside(kept, s, bool(prep.test_idx)))
    predictions = prediction_tables(prep, kept, served, s)
    confusion = (s.scored_targets.argmax(axis=1), s.decide(kept.probs.scored, kept.thresholds).argmax(axis=1))
    probe = probe_figures(clf.probe, s)
    log_figures(rc.log, a, s, forward, extra, baseline, probe, b, kept.name, bwd is not None)
    figures = {
        "labels": s.labels,
        "multi_label": s.multi,
        "allow_empty": s.allow_empty,
        "tokenizer": prep.tokenizer.id,
        "bidirectional": bwd is not None,
        "base_lm": base_lm_record(rc, base),
        **kept.figures,
        "rows": s.rows,
        **extra,
        "kept": kept.name,
        # the classifier predict serves without the blend: the ensemble for a bidirectional run
        "classifier": dict(extra["ensemble"]) if bwd is not None else dict(forward),
        "best_epoch": clf.best_epoch,
        "blend": b.figures,
        "probe": probe,
        "threshold_policy": a.thresholds if s.multi else None,
        "selection": {"rows": "valid", "criterion": "log loss", **b.choice.valid},
        "baseline": {**baseline, "rows": {"fit": "train", "scores": s.split}},
        "baseline_tfidf": {**b.tfidf, "rows": s.rows},
        "split": {"source": prep.splits.source, "duplicates_dropped": prep.splits.duplicates_dropped},
        "n_train": len(prep.train_idx),
        "n_valid": len(prep.valid_idx),
        "n_test": len(prep.test_idx),
        "unlabelled": prep.domain_info.record() if prep.domain_info is not None else None,
    }
    return Evaluation(figures, predictions, confusion, b.tfidf_model.save() if kept.name == blend.BLEND else None)
