"""A run's model logged to MLflow as a pyfunc (trainer.serving.mlflow_pyfunc), loadable without trainctl.

The model carries the run's files a served model is made of (trainer.serving.served_model: model.pth with
its tokenizer, metrics.json with labels, thresholds and what was kept, the backward model and the TF-IDF
part when the run has them) and the trainer's code, copied under a name of its own
(trainer.serving.model_code), so models exported from different trees load side by side. A run that kept
TF-IDF alone carries metrics.json and the TF-IDF files only: its model needs scikit-learn, not torch.
Its requirements are what its prediction imports, pinned to what the run trained with
(metadata/trainer.json), so `mlflow models serve` builds the same environment. Nothing here needs torch:
the operator's CLI logs the files, it never loads them.

The code carried is the exporting checkout's `trainer`: a run records its commit (metadata/trainctl.json),
not its code. The model's metadata and tags say so, with the code's package name and the checkout's commit.

Its two slow steps (the run's files from the bucket, the model up to MLflow: a model.pth is tens to hundreds
of MB) are shown by the report a command sets around its mirror (`reporting_transfers`); unset, nothing is said.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import trainer
from stacks.tracking.record import Mirror
from stacks.tracking.run_tags import MLFLOW_SOURCE_PREFIX, MLFLOW_USER
from trainer.runfiles.keys import TRAINCTL_META, run_key
from trainer.storage import Bucket

TRAINER_CODE = Path(trainer.__file__).parent  # this checkout's package: what a model of a run without its code carries
MODEL_CODE = Path("serving") / "mlflow_model_code.py"  # MLflow's "models from code", inside the package


@dataclass
class Transfer:
    """One slow step as a report sees it: `size` in bytes, set by the step once it is known (a download's)."""

    size: int | None = None


@contextmanager
def _unreported(doing: str, size: int | None = None):
    yield Transfer(size)


# A context variable, not an argument: a training command mirrors each run from the worker thread that
# followed it, under its live view, and a thread never sees the command's report: those stay silent.
_REPORT: ContextVar = ContextVar("model_transfer_report", default=_unreported)


@contextmanager
def reporting_transfers(report):
    """Inside the `with`, logging a model shows its slow steps with `report(doing, size)`: a context manager
    around the step, yielding a Transfer (stacks.cli.transfer_progress.TransferReport)."""
    token = _REPORT.set(report)
    try:
        yield
    finally:
        _REPORT.reset(token)


def folder_size(path: Path) -> int:
    path = Path(path)
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


TFIDF_REQUIREMENTS = ("numpy", "pandas", "scikit-learn", "scipy")  # the TF-IDF part and the pyfunc's frames
CLASSIFIER_REQUIREMENTS = ("torch", "fastai", "spacy")  # the classifier; spaCy tokenizes its texts


def requirements(trainer_meta: dict, metrics: dict) -> list[str]:
    """pip requirements of what the model's prediction imports, pinned to the versions the run trained with
    (metadata/trainer.json; a local build tag like +cu130 dropped; a run from before `packages` was recorded
    pins torch and fastai alone). A run that kept TF-IDF alone needs no torch, fastai or spaCy."""
    import mlflow

    recorded = {**(trainer_meta.get("packages") or {})}
    recorded.update({name: trainer_meta[name] for name in ("torch", "fastai") if trainer_meta.get(name)})

    def pinned(name: str) -> str:
        value = recorded.get(name)
        return f"{name}=={str(value).split('+', 1)[0]}" if value else name

    names = list(TFIDF_REQUIREMENTS)
    if not tfidf_alone(metrics):
        names += CLASSIFIER_REQUIREMENTS
        if str(metrics.get("tokenizer", "")).startswith("sentencepiece"):
            names.append("sentencepiece")
    return [f"mlflow=={mlflow.__version__}", *(pinned(name) for name in names)]


def tfidf_alone(metrics: dict) -> bool:
    """The run kept a blend that weighs the classifier 0 (RunMetrics.tfidf_alone, on the raw document)."""
    weight = (metrics.get("blend") or {}).get("weight")
    return metrics.get("kept") == "blend" and isinstance(weight, (int, float)) and weight <= 0


def code_version(source: Path = TRAINER_CODE) -> str:
    """Which trainer code the model carries: the checkout's commit, else the installed package's version.
    (The model's code is the exporting trainctl's `trainer`; a run trained by another commit is told apart by
    this tag next to `trainstack.git_sha`.)"""
    from importlib.metadata import PackageNotFoundError, version

    from stacks.runs.stack_ops import git_sha

    try:
        sha = git_sha(Path(source).resolve().parent)
    except OSError:  # no git on this machine
        sha = None
    if sha:
        return sha
    try:
        return f"trainstack {version('trainstack')}"
    except PackageNotFoundError:
        return "unknown"


def logged_before(tracker, mlflow_run_id: str) -> str | None:
    """The URI of the model a previous export logged for this run (one cut short before it said so), or None.
    A model left unfinished (its upload cut) is deleted where the account may: it never served."""
    from mlflow.entities import LoggedModelStatus

    models = tracker.client.search_logged_models(
        [tracker.experiment_id], filter_string=f"source_run_id = '{mlflow_run_id}' AND name = 'model'"
    )
    ready = [m for m in models if m.status == LoggedModelStatus.READY]
    for unfinished in (m for m in models if m.status != LoggedModelStatus.READY):
        try:
            tracker.client.delete_logged_model(unfinished.model_id)
        except Exception:  # a leftover costs space, never the export
            pass
    return ready[0].model_uri if ready else None


class _Pyfunc:
    """mlflow.pyfunc as MLflow's Model.log sees a flavor, without its serving check: with an input example,
    Model.log loads the model and predicts with it (torch, fastai, the whole model.pth) unless told
    `validate_serving_input=False`, which it reads from the flavor's arguments and mlflow.pyfunc refuses.
    The mirror never loads a model (the CLI has no torch); the e2e tests load and predict it instead."""

    @staticmethod
    def save_model(*, validate_serving_input: bool = True, **kwargs):
        import mlflow.pyfunc

        return mlflow.pyfunc.save_model(**kwargs)


def _input_example(bucket: Bucket, lang: str, run_id: str, *, rows: int = 3):
    """A few of the run's own validation texts, as the model takes them (None: the run kept none)."""
    import csv
    import io

    import pandas as pd

    from trainer.serving.mlflow_pyfunc import TEXT_COLUMN

    key = run_key(lang, run_id, "valid_predictions.csv")
    if not bucket.exists(key):
        return None
    reader = csv.DictReader(io.StringIO(bucket.read_bytes(key).decode("utf-8")))
    texts = [row["text"][:500] for row, _ in zip(reader, range(rows)) if row.get("text")]  # a glimpse
    return pd.DataFrame({TEXT_COLUMN: texts}) if texts else None


def signature(labels: list[str]):
    """Texts in; out, the labels decided (an array of strings per row), each label's probability (a double)
    and why a row was not classified (absent where it was), as trainer.serving.mlflow_pyfunc returns them."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, DataType, Schema
    from mlflow.types.schema import Array

    from trainer.serving.mlflow_pyfunc import ERROR, LABELS, TEXT_COLUMN, prob_column

    outputs = [
        ColSpec(Array(DataType.string), LABELS),
        *(ColSpec(DataType.double, prob_column(label)) for label in labels),
        ColSpec(DataType.string, ERROR, required=False),
    ]
    return ModelSignature(inputs=Schema([ColSpec(DataType.string, TEXT_COLUMN)]), outputs=Schema(outputs))


def _serves_tfidf_alone(code: Path) -> bool:
    """Whether a trainer package serves a run that kept TF-IDF alone without its model.pth (code from before
    that needs model.pth, which that model does not carry)."""
    served = Path(code) / "serving" / "served_model.py"
    return served.is_file() and "TFIDF_SERVED_FILES" in served.read_text(encoding="utf-8")


def _model_code(
    bucket: Bucket, lang: str, run_id: str, tmp: Path, given: Path | None, run_commit: str, *, tfidf: bool = False
):
    """(the trainer package folder a model carries, where it came from in words)."""
    from trainer.runfiles.code_archive import extract_code
    from trainer.runfiles.keys import CODE_ARCHIVE

    if given is not None:
        return Path(given), f"{given}, given"
    key = run_key(lang, run_id, CODE_ARCHIVE)
    if bucket.exists(key):
        own = extract_code(bucket.read_bytes(key), tmp / "run-code")
        if not tfidf or _serves_tfidf_alone(own):
            return own, f"the run's own ({CODE_ARCHIVE}, {run_commit})"
        return TRAINER_CODE, (
            f"the exporting checkout, {code_version(TRAINER_CODE)}: the run's own ({run_commit}) serves its "
            "TF-IDF only with model.pth, which this model leaves out (the TF-IDF computation is the same)"
        )
    return TRAINER_CODE, (
        f"the exporting checkout, {code_version(TRAINER_CODE)}: the run kept no code, only its commit ({run_commit})"
    )


@contextmanager
def pyfunc_model(bucket: Bucket, lang: str, run_id: str, *, code_source: Path | None = None):
    """The arguments mlflow.pyfunc.save_model (and Model.log) take for the run's model, valid inside the
    `with`: its files downloaded to a temporary folder, and its code copied there under its own name
    (trainer.serving.model_code), importable while MLflow saves. The code is `code_source` (a trainer package's
    folder) when given, else the run's own (code/trainer.zip), else, for a run that kept none, this checkout's."""
    from trainer.serving.model_code import copy_code, importable, zipped
    from trainer.serving.served_model import METRICS, SERVED_FILES, TFIDF_SERVED_FILES

    metrics = json.loads(bucket.read_bytes(run_key(lang, run_id, METRICS)))
    meta_key = run_key(lang, run_id, "metadata/trainer.json")
    trainer_meta = json.loads(bucket.read_bytes(meta_key)) if bucket.exists(meta_key) else {}
    trainctl_key = run_key(lang, run_id, TRAINCTL_META)
    run_commit = (
        json.loads(bucket.read_bytes(trainctl_key)).get("git_sha") if bucket.exists(trainctl_key) else None
    ) or "unknown"
    with tempfile.TemporaryDirectory(prefix="trainstack-model-") as tmp:
        files = {}  # keyed by the run's own file names: what ServedModel.load takes
        with _REPORT.get()(f"downloading the model files of {lang} {run_id} from the bucket") as step:
            for name in TFIDF_SERVED_FILES if tfidf_alone(metrics) else SERVED_FILES:
                if bucket.exists(run_key(lang, run_id, name)):
                    bucket.download(run_key(lang, run_id, name), Path(tmp) / "artifacts" / name)
                    files[name] = str(Path(tmp) / "artifacts" / name)
            step.size = sum(folder_size(Path(path)) for path in files.values())
        source, origin = _model_code(
            bucket, lang, run_id, Path(tmp), code_source, run_commit, tfidf=tfidf_alone(metrics)
        )
        code = copy_code(source=source, dest=Path(tmp) / "code")
        with importable(code):
            yield dict(
                python_model=str(code / MODEL_CODE),
                artifacts=files,
                code_paths=[str(zipped(code))],  # one file; the code file puts it on sys.path
                pip_requirements=requirements(trainer_meta, metrics),
                signature=signature(list(metrics.get("labels") or [])),
                input_example=_input_example(bucket, lang, run_id),
                metadata={
                    "trainstack.run_id": run_id,
                    "trainstack.lang": lang,
                    "trainstack.code_package": code.name,
                    "trainstack.code_origin": origin,
                },
            )


def _logged_model(tracker, mirror: Mirror, mlflow_run_id: str, tags: dict[str, str]):
    """The logged model's entry, in the run's own experiment (Model.log without one falls back to MLflow's
    active experiment, "0": the run's page would list no model, and an account with rights on the run's
    experiment alone is refused). Its tags are the run's MLflow source fields, not this exporting process's
    (Model.log would name the venv's trainctl as a LOCAL source)."""
    source = {k: v for k, v in mirror.tags.items() if k.startswith(MLFLOW_SOURCE_PREFIX) or k == MLFLOW_USER}
    return tracker.client.create_logged_model(
        experiment_id=tracker.experiment_id,
        name="model",
        source_run_id=mlflow_run_id,
        tags={**source, **tags},
        params=mirror.params,
    )


def log_model(tracker, bucket: Bucket, mirror: Mirror, mlflow_run_id: str) -> str:
    """Logs the run's model under its MLflow run, once; returns the model's URI
    (models:/...). At the run's last step, so MLflow 3 links the final figures logged there to the model,
    with the run's params. No fluent run is started: MLflow would attach this machine's system metrics to
    the run where MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING is on (and fail without psutil), and end it."""
    if (uri := logged_before(tracker, mlflow_run_id)) is not None:
        return uri
    from stacks.tracking.client import fluent_uris, quiet

    with pyfunc_model(bucket, mirror.lang, mirror.run_id) as model:
        tags = dict(model["metadata"])  # so the list of logged models shows which code each carries
        size = sum(folder_size(Path(path)) for path in [*model["artifacts"].values(), *model["code_paths"]])
        with (
            _REPORT.get()(f"logging the model of {mirror.lang} {mirror.run_id} to MLflow", size),
            quiet(),
            fluent_uris(tracker),
        ):
            from mlflow.models import Model

            entry = _logged_model(tracker, mirror, mlflow_run_id, tags)
            info = Model.log(
                artifact_path=None,
                name="model",
                flavor=_Pyfunc,
                flavor_name="pyfunc.ModelFromCode",
                validate_serving_input=False,
                run_id=mlflow_run_id,
                model_id=entry.model_id,
                step=mirror.final_step,
                **model,
            )
    return info.model_uri
