"""The end of a run (rank 0): upload the models, predictions, plots and metadata, metrics.json last."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import fastai
import torch

from trainer.classification import plots
from trainer.runfiles.code_archive import archive_code
from trainer.runfiles.keys import BWD_MODEL, CODE_ARCHIVE
from trainer.runfiles.metrics_file import RunMetrics
from trainer.runfiles.report_html import render_run
from trainer.stages.classifier import TrainedClassifier
from trainer.stages.evaluate import Evaluation
from trainer.text.loaders import raw_text_dataloaders


def _megabytes(size: float) -> str:
    return f"{size / 1e6:,.1f} MB"


def cpu_name() -> str | None:
    """This machine's processor as the kernel names it (platform.processor() is often empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


# What serving the model imports (trainer.serving): pinned at these versions in its MLflow requirements
SERVING_PACKAGES = ("numpy", "pandas", "scikit-learn", "scipy", "torch", "fastai", "spacy", "sentencepiece")


def package_versions(names=SERVING_PACKAGES) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def put_model(rc, path, name: str, *, export_s: float, clock=time.monotonic) -> None:
    """Uploads an exported model file as `name`, saying its size first (flushed: a follower sees what the run
    waits on, a model.pth being tens to hundreds of MB) and how long it took after."""
    size = path.stat().st_size
    rc.log.line(f"{name}: exported ({_megabytes(size)}) in {export_s:.1f} s; uploading it")
    rc.log.flush()
    started = clock()
    rc.put(path, name)
    seconds = clock() - started
    rc.log.line(f"{name}: uploaded ({_megabytes(size)}) in {seconds:.1f} s ({_megabytes(size / max(seconds, 1e-3))}/s)")


def upload(
    rc, fit, prep, clf: TrainedClassifier, bwd: TrainedClassifier | None, evaluation: Evaluation, started: float
) -> None:
    a, put, work, data = rc.a, rc.put, rc.work, prep.data
    result = evaluation.figures
    rc.stage("uploading")
    # model.pth predicts raw strings: export with the tokenizer pipeline, not the cached ids.
    exports = [("model.pth", clf)]
    if bwd is not None:  # trainctl predict averages the two when both are there
        exports.append((BWD_MODEL, bwd))
    for name, trained in exports:
        learn, dls = trained.learn, trained.dls
        learn.dls = raw_text_dataloaders(
            dls,
            prep.tokenizer,
            trained.vocab,
            data.label_names,
            data.multi_label,
            scratch=work,
            backwards=trained.backwards,
        )
        exporting = time.monotonic()
        learn.export(work / name)
        learn.dls = dls
        put_model(rc, work / name, name, export_s=time.monotonic() - exporting)
    for name, blob in (evaluation.tfidf_files or {}).items():  # the kept blend's TF-IDF part
        put(blob, name)
    for name, table in evaluation.predictions.items():
        put(table, name)
    plot = plots.history(fit.history, work / "history.png")
    if plot:
        put(plot, "plots/history.png")
    put(plots.per_label_f1(result, work / "per_label_f1.png"), "plots/per_label_f1.png")
    if not data.multi_label:
        true_idx, pred_idx = evaluation.confusion
        put(
            plots.confusion(true_idx, pred_idx, result["labels"], work / "confusion.png", result["rows"]["scores"]),
            "plots/confusion_matrix.png",
        )
    meta = {
        "args": vars(a),
        "data_hash": prep.data_hash,
        "split_digests": prep.splits.digests(prep.data_hash),
        "arch": fit.arch,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "fastai": fastai.__version__,
        "packages": package_versions(),
        "platform": platform.platform(),
        "device": str(rc.ctx.device),
        "precision": rc.precision,
        "world_size": rc.ctx.world,
        # the machine it ran on, as it saw itself: a local run has no cloud machine to name
        "cpu": cpu_name(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "image": os.environ.get("TRAINSTACK_IMAGE"),
        "base_lm": result["base_lm"],
    }
    put(json.dumps(meta, indent=2, default=str).encode(), "metadata/trainer.json")
    # the code that trained the model, for the tracker's logged model to carry (not the exporting checkout's)
    put(archive_code(Path(__file__).resolve().parents[1]), CODE_ARCHIVE)
    metrics = RunMetrics.from_document(
        {
            "run_id": a.run_id,
            "lang": a.lang,
            **result,
            "duration_s": round(time.time() - started, 1),
            "history": fit.history,
        }
    )
    # report.html from the figures in memory (trainctl renders it again with the cost once the stack is gone)
    try:
        put(render_run(rc.bucket, a.lang, a.run_id, metrics=metrics), "report.html", optional=True)
    except Exception as exc:  # a page must never fail a run that trained: trainctl renders it again later
        rc.log.line(f"warning: report.html not written: {exc!r}")
    # metrics.json last: its presence means every other artifact is in place.
    put(metrics.to_json(), "metrics.json")
