"""Load an exported model.pth and classify texts with the run's decision thresholds."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from trainer.runfiles.metrics_file import RunMetrics


def load_model(path: Path):
    with warnings.catch_warnings():
        # fastai's import (torch.jit.script's deprecation) and load_learner (pickle) warn on every call:
        # nothing a user of predict can act on; we load our own artifacts
        warnings.simplefilter("ignore")
        from fastai.learner import load_learner

        return load_learner(path, cpu=True)


def probabilities(learn, texts: list[str], learn_bwd=None) -> np.ndarray:
    """(rows, labels) probabilities of a batch of texts, in their order; with `learn_bwd` (model_bwd.pth)
    the forward and backward models' averaged."""
    import pandas as pd

    def one(model) -> np.ndarray:
        # one DataLoader over the batch: fastai sorts it by length and get_preds puts it back in order
        # val_res: sort by characters, a proxy for tokens; without it the SortedDL tokenizes every
        # text once to measure it and again to batch it (twice the time)
        dl = model.dls.test_dl(pd.DataFrame({"text": list(texts)}), bs=model.dls.bs,
                               val_res=[len(text) for text in texts])
        with warnings.catch_warnings(), model.no_bar():
            warnings.simplefilter("ignore")
            probs = model.get_preds(dl=dl)[0].numpy()
        return probs

    p = one(learn)
    return (p + one(learn_bwd)) / 2 if learn_bwd is not None else p


def load_tfidf(spec_json: bytes, arrays_npz: bytes):
    """The TF-IDF part of a kept blend (arrays and vocabularies; nothing unpickled)."""
    from trainer.classification.baseline import TfidfModel

    return TfidfModel.load(spec_json, arrays_npz)


def blended(probs: np.ndarray, texts: list[str], metrics: RunMetrics, tfidf, *, backward: bool = False) -> np.ndarray:
    """The run's kept probabilities: the classifier's, or its blend with TF-IDF (metrics.blend_weight).
    `backward`: `probs` are the forward+backward ensemble's (a bidirectional run's blend starts from those)."""
    if not metrics.blended:
        return probs
    if metrics.ensemble is not None and not backward:
        raise ValueError(f"run {metrics.run_id} kept the blend of its forward+backward ensemble with TF-IDF: "
                         "the forward model's probabilities alone were never scored in that blend")
    if tfidf is None:
        raise ValueError(f"run {metrics.run_id} kept the blend with TF-IDF, but its tfidf.json/tfidf.npz are missing")
    w = metrics.blend_weight
    return w * probs + (1.0 - w) * tfidf.probabilities(list(texts))


def decide_labels(probs: np.ndarray, metrics: RunMetrics, *, ensemble: bool) -> list[list[str]]:
    """The labels of each row: the run's tuned thresholds (multi-label) or argmax; a kept blend's are
    the run's top-level thresholds."""
    from trainer.classification.metrics import decide

    labels = metrics.labels
    figures = metrics.model if metrics.blended or not ensemble else metrics.ensemble
    thresholds = figures.thresholds(labels)
    pred = decide(probs, multi_label=metrics.multi_label,
                  thresholds=np.array(thresholds, dtype=float) if metrics.multi_label else None,
                  allow_empty=metrics.allow_empty)
    return [[label for label, yes in zip(labels, row) if yes] for row in pred]


def predict_texts(learn, texts: list[str], metrics: RunMetrics,
                  learn_bwd=None, tfidf=None) -> list[tuple[list[str], dict[str, float]]]:
    """Labels and probabilities per text; with `learn_bwd` (model_bwd.pth) the forward+backward
    ensemble's: the two models' probabilities averaged, decided with the ensemble's thresholds;
    with a kept blend, mixed with `tfidf`'s (load_tfidf)."""
    if not texts:
        return []
    probs = blended(probabilities(learn, texts, learn_bwd), texts, metrics, tfidf, backward=learn_bwd is not None)
    chosen = decide_labels(probs, metrics, ensemble=learn_bwd is not None)
    return [(labels, {l: float(v) for l, v in zip(metrics.labels, row)}) for labels, row in zip(chosen, probs)]
