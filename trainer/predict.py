"""Load an exported model.pth and classify texts with the run's decision thresholds."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from trainer.run_metrics import RunMetrics


def load_model(path: Path):
    from fastai.learner import load_learner

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pickle warning: we load our own artifacts
        return load_learner(path, cpu=True)


def predict_texts(learn, texts: list[str], metrics: RunMetrics,
                  learn_bwd=None) -> list[tuple[list[str], dict[str, float]]]:
    """Labels and probabilities per text; with `learn_bwd` (model_bwd.pth) the forward+backward
    ensemble's: the two models' probabilities averaged, decided with the ensemble's thresholds."""
    from trainer.metrics import decide

    labels = metrics.labels
    thresholds = (metrics.ensemble if learn_bwd is not None else metrics.model).thresholds(labels)
    multi = metrics.multi_label
    out = []
    for text in texts:
        p = learn.predict(text)[2].numpy()[None, :]
        if learn_bwd is not None:
            p = (p + learn_bwd.predict(text)[2].numpy()[None, :]) / 2
        pred = decide(p, multi_label=multi, thresholds=np.array(thresholds, dtype=float) if multi else None,
                      allow_empty=metrics.allow_empty)[0]
        out.append(([l for l, yes in zip(labels, pred) if yes], {l: float(v) for l, v in zip(labels, p[0])}))
    return out
