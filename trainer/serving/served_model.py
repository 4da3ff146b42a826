"""The served model: what `trainctl predict` (texts or a whole file) and the MLflow pyfunc classify with.

A run's files make it: model.pth (the fastai learner, its tokenizer inside), metrics.json (labels,
thresholds, what the run kept), model_bwd.pth (a bidirectional run's backward classifier) and
tfidf.json/tfidf.npz (the TF-IDF part of a kept blend). A run that kept TF-IDF alone (a blend weighing the
classifier 0) is served from metrics.json and the TF-IDF files: no model.pth, no torch. It decides as
the run was scored: the classifier's probabilities (with model_bwd.pth, the forward and backward models'
averaged), mixed with TF-IDF's at the kept blend weight, then the run's tuned thresholds (multi-label) or
argmax.

This module runs under two package names: `trainer` in trainctl, and `trainer_<hash>` inside a logged
model (trainer/serving/model_code.py says why). model.pth pickles the trainer's classes as `trainer.…`;
they are looked up in the package this module belongs to, so a logged model unpickles its own code.
"""

from __future__ import annotations

import os
import pickle
import queue
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Mapping

import numpy as np

from trainer.errors import DataError
from trainer.runfiles.keys import BWD_MODEL, TFIDF_FILES
from trainer.runfiles.metrics_file import RunMetrics
from trainer.serving import padded_batches

MODEL, METRICS = "model.pth", "metrics.json"
MOST_BATCHES_AT_ONCE = 4  # past this, the texts' tokenizing (Python, one at a time) is what the batches wait on
SERVED_FILES = (MODEL, METRICS, BWD_MODEL, *TFIDF_FILES)  # every file a served model may be made of
TFIDF_SERVED_FILES = (METRICS, *TFIDF_FILES)  # those of a run that kept TF-IDF alone
TRAINING_PACKAGE = "trainer"  # the name model.pth's classes were pickled under
CODE_PACKAGE = __name__.split(".")[0]  # where they are found: `trainer`, or a logged model's own copy


class UnservableRun(DataError):
    """The run's files do not make the model it kept (a file missing, or one that is not a model)."""

    def __init__(self, message: str, *, hint: str | None = None, file: str | None = None):
        super().__init__(message, hint=hint)
        self.file = file  # the run file that would not load as a model, where one would not


class _OwnCodeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if CODE_PACKAGE != TRAINING_PACKAGE and module.split(".")[0] == TRAINING_PACKAGE:
            module = CODE_PACKAGE + module[len(TRAINING_PACKAGE) :]
        return super().find_class(module, name)


# torch.load's pickle_module: it subclasses `Unpickler` (and calls `load` for pre-zip files)
_OWN_CODE_PICKLE = SimpleNamespace(
    __name__=pickle.__name__,
    Unpickler=_OwnCodeUnpickler,
    load=lambda file, **kwargs: _OwnCodeUnpickler(file, **kwargs).load(),
)


def load_learner_file(path: Path):
    """An exported fastai learner (model.pth, model_bwd.pth) on the CPU, its classes from CODE_PACKAGE."""
    with warnings.catch_warnings():
        # fastai's import (torch.jit.script's deprecation) and load_learner (pickle) warn on every call:
        # nothing a user of predict can act on; we load our own artifacts
        warnings.simplefilter("ignore")
        from fastai.learner import load_learner

        from trainer.text.regex_memo import large_patterns_remembered

        with large_patterns_remembered():  # a French model's tokenizer compiles spaCy's French rules
            return load_learner(path, cpu=True, pickle_module=_OWN_CODE_PICKLE)


def load_tfidf(spec_json: bytes, arrays_npz: bytes):
    """The TF-IDF part of a kept blend (arrays and vocabularies; nothing unpickled)."""
    from trainer.classification.baseline import TfidfModel

    return TfidfModel.load(spec_json, arrays_npz)


def _learner_probabilities(learn, texts: list[str]) -> np.ndarray:
    """fastai's own path: get_preds over a test DataLoader (padded_batches gives the same, faster)."""
    import pandas as pd

    # one DataLoader over the batch: fastai sorts it by length and get_preds puts it back in order.
    # val_res: sort by characters, a proxy for tokens; without it the SortedDL tokenizes every text
    # once to measure it and again to batch it (twice the time)
    dl = learn.dls.test_dl(pd.DataFrame({"text": list(texts)}), bs=learn.dls.bs, val_res=[len(text) for text in texts])
    with warnings.catch_warnings(), learn.no_bar():
        warnings.simplefilter("ignore")
        return learn.get_preds(dl=dl)[0].numpy()


def _check_parts(metrics: RunMetrics, *, backward: bool, tfidf: bool) -> None:
    """Refuses parts that were never scored together, before anything heavy loads."""
    if not metrics.blended:
        return
    if metrics.ensemble is not None and not backward:
        raise UnservableRun(
            f"run {metrics.run_id} kept the blend of its forward+backward ensemble with TF-IDF: the forward "
            f"model alone (--forward-only, or no {BWD_MODEL}) was never scored in that blend",
            hint="drop --forward-only, or serve another run with --run",
        )
    if not tfidf:
        raise UnservableRun(
            f"run {metrics.run_id} kept the blend with TF-IDF, but its {'/'.join(TFIDF_FILES)} are missing",
            hint="serve another run with --run",
        )


class ServedModel:
    """A run's kept model, loaded once: `predict(texts)` -> (labels per text, probabilities per label)."""

    def __init__(self, *, metrics: RunMetrics, learn=None, learn_bwd=None, tfidf=None):
        _check_parts(metrics, backward=learn_bwd is not None or metrics.tfidf_alone, tfidf=tfidf is not None)
        if learn is None and not metrics.tfidf_alone:
            raise UnservableRun(f"run {metrics.run_id} kept {metrics.kept_name}: it needs its {MODEL}")
        self.metrics, self.tfidf = metrics, tfidf if metrics.blended else None
        # TF-IDF alone: the classifier's share is 0, so it is neither loaded nor run
        self.learn, self.learn_bwd = (None, None) if metrics.tfidf_alone else (learn, learn_bwd)
        self.text_model = padded_batches.text_model(learn) if self.learn is not None else None
        self._free: queue.SimpleQueue | None = None  # text models free to classify a batch, once batches run at once

    @classmethod
    def load(
        cls, *, files: Mapping[str, Path], metrics: RunMetrics | None = None, forward_only: bool = False
    ) -> "ServedModel":
        """From a run's files by name (SERVED_FILES: those the run has); `metrics` when read already, else
        files[metrics.json]. model_bwd.pth makes the forward+backward ensemble, unless `forward_only`."""
        if metrics is None and METRICS in files:
            metrics = RunMetrics.from_json(Path(files[METRICS]).read_bytes())
        if MODEL not in files and (metrics is None or not metrics.tfidf_alone):
            raise UnservableRun(f"no {MODEL} among the run's files ({', '.join(files) or 'none'})")
        tfidf = metrics.blended and all(name in files for name in TFIDF_FILES)
        if metrics.tfidf_alone:
            _check_parts(metrics, backward=True, tfidf=tfidf)
            return cls(metrics=metrics, tfidf=load_tfidf(*(Path(files[name]).read_bytes() for name in TFIDF_FILES)))
        backward = BWD_MODEL in files and metrics.ensemble is not None and not forward_only
        _check_parts(metrics, backward=backward, tfidf=tfidf)
        tfidf_part = load_tfidf(*(Path(files[name]).read_bytes() for name in TFIDF_FILES)) if tfidf else None
        return cls(
            metrics=metrics,
            learn=_load_part(files, MODEL),
            learn_bwd=_load_part(files, BWD_MODEL) if backward else None,
            tfidf=tfidf_part,
        )

    @classmethod
    def from_folder(cls, folder: Path, *, forward_only: bool = False) -> "ServedModel":
        """From a folder holding a run's files under their own names."""
        files = {name: Path(folder) / name for name in SERVED_FILES if (Path(folder) / name).exists()}
        return cls.load(files=files, forward_only=forward_only)

    @property
    def run_id(self) -> str:
        return self.metrics.run_id

    @property
    def labels(self) -> list[str]:
        return self.metrics.labels

    @property
    def ensemble(self) -> bool:
        """Whether it serves the forward+backward ensemble (model_bwd.pth loaded)."""
        return self.learn_bwd is not None

    def use_cores(self, cores: int | None = None) -> int:
        """Lets `predict` run on up to `cores` threads at once (default: the cores this process may use, at most
        torch's threads, which OMP_NUM_THREADS sets), one batch and one torch thread each -> how many batches may
        run at once. A batch's tokenizing (Python) then runs while another's AWD-LSTM forward (torch, without the
        GIL) does, where torch's own threads on one batch of this size barely scale and spin on a busy core. Each
        batch takes a model module of its own (the weights shared). Served by fastai's own pipeline (a backward
        model), or on one core: one batch at a time, as before."""
        if self.text_model is None or self.learn_bwd is not None:
            return 1
        import torch

        cores = min(cores or len(os.sched_getaffinity(0)), torch.get_num_threads(), MOST_BATCHES_AT_ONCE)
        if cores < 2:
            return 1
        torch.set_num_threads(1)
        self._free = queue.SimpleQueue()
        self._free.put(self.text_model)
        for _ in range(cores - 1):
            self._free.put(padded_batches.replica(self.text_model))
        return cores

    def probabilities(self, texts: list[str]) -> np.ndarray:
        """(texts, labels) probabilities of what the run kept, in the texts' order."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, len(self.labels)))
        if self.learn is None:  # TF-IDF alone
            return self.tfidf.probabilities(texts)
        if self.text_model is None:
            probs = _learner_probabilities(self.learn, texts)
        else:
            probs = self._text_probabilities(texts)
        if self.learn_bwd is not None:
            probs = (probs + _learner_probabilities(self.learn_bwd, texts)) / 2
        if self.tfidf is not None:
            weight = self.metrics.blend_weight
            probs = weight * probs + (1.0 - weight) * self.tfidf.probabilities(list(texts))
        return probs

    def _text_probabilities(self, texts: list[str]) -> np.ndarray:
        if self._free is None:
            return padded_batches.probabilities(self.text_model, texts)
        parts = self._free.get()  # never more batches at once than models: classify_file runs that many
        try:
            return padded_batches.probabilities(parts, texts)
        finally:
            self._free.put(parts)

    def decide(self, probs: np.ndarray) -> list[list[str]]:
        """The labels of each row: the tuned thresholds of what was kept (a kept blend's are the run's
        top-level ones, the ensemble's its own) for multi-label, else argmax."""
        from trainer.classification.metrics import decide

        metrics = self.metrics
        figures = metrics.model if metrics.blended or not self.ensemble else metrics.ensemble
        thresholds = np.array(figures.thresholds(self.labels), dtype=float) if metrics.multi_label else None
        chosen = decide(probs, multi_label=metrics.multi_label, thresholds=thresholds, allow_empty=metrics.allow_empty)
        return [[label for label, yes in zip(self.labels, row) if yes] for row in chosen]

    def predict(self, texts: list[str]) -> tuple[list[list[str]], np.ndarray]:
        """(labels of each text, (texts, labels) probabilities)."""
        probs = self.probabilities(texts)
        return self.decide(probs), probs


def _load_part(files: Mapping[str, Path], name: str):
    """One learner file; bytes that do not load as a model are the run's fault, not a bug."""
    try:
        return load_learner_file(Path(files[name]))
    except (ImportError, MemoryError):
        raise  # this machine's trouble (the trainer's packages, its memory), not the file's
    except Exception as exc:  # pickle, torch and fastai each raise their own for bytes that are not our model
        raise UnservableRun(
            f"{files[name]} cannot be loaded as a model ({type(exc).__name__}: {exc})", file=name
        ) from exc
