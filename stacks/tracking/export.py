"""Mirror runs into MLflow: one MLflow run per trainstack run, found again by its run-id tag.

Idempotent by construction: a run's mirror is looked up by `trainstack.run_id` (+ lang) before anything
is created; params are written once (MLflow's are immutable), metric points only for the (key, step)
pairs it lacks, dataset inputs only those it lacks, files overwrite their own path, and `trainstack.source_sha` is
written last: a mirror
cut short is completed by the next export, one that is complete and unchanged is left alone.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from stacks.tracking.record import SOURCE_TAG, Mirror
from stacks.tracking.run_tags import MLFLOW_DATASET_CONTEXT, MLFLOW_USER
from trainer.runfiles.keys import run_key
from trainer.storage import Bucket

BATCH = {"metrics": 1000, "params": 100, "tags": 100}  # MLflow's log_batch limits
MODEL_TAG = "trainstack.model_uri"


@dataclass(frozen=True)
class Exported:
    lang: str
    run_id: str
    action: str  # created, updated, unchanged
    mlflow_run_id: str


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _present_points(client, mlflow_run_id: str, keys: set[str]) -> set[tuple[str, int]]:
    return {(key, point.step) for key in keys for point in client.get_metric_history(mlflow_run_id, key)}


def _write_values(client, mlflow_run_id: str, mirror: Mirror, found) -> None:
    from mlflow.entities import Metric, Param, RunTag

    have_params = found.data.params if found is not None else {}
    params = [Param(k, v[:6000]) for k, v in mirror.params.items() if k not in have_params]
    present = _present_points(client, mlflow_run_id, {m.key for m in mirror.metrics}) if found is not None else set()
    metrics = [Metric(m.key, m.value, m.timestamp_ms, m.step) for m in mirror.metrics if (m.key, m.step) not in present]
    tags = [RunTag(k, v) for k, v in _run_tags(mirror, found).items()]
    for chunk in _chunks(params, BATCH["params"]):
        client.log_batch(mlflow_run_id, params=chunk)
    for chunk in _chunks(tags, BATCH["tags"]):
        client.log_batch(mlflow_run_id, tags=chunk)
    for chunk in _chunks(metrics, BATCH["metrics"]):
        client.log_batch(mlflow_run_id, metrics=chunk)


def _write_datasets(client, mlflow_run_id: str, mirror: Mirror, found) -> None:
    """The run's data as MLflow dataset inputs, those it lacks (an input once logged cannot be changed)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = found.inputs.dataset_inputs if found is not None and found.inputs else []
    have = {(i.dataset.name, i.dataset.digest) for i in inputs}
    wanted = [
        DatasetInput(
            Dataset(
                d.name, d.digest, d.source_type, json.dumps({"uri": d.source_uri}), schema=d.schema, profile=d.profile
            ),
            tags=[InputTag(MLFLOW_DATASET_CONTEXT, d.context)],
        )
        for d in mirror.datasets
        if (d.name, d.digest) not in have
    ]
    if wanted:
        client.log_inputs(mlflow_run_id, datasets=wanted)


def _run_tags(mirror: Mirror, found) -> dict[str, str]:
    """The mirror's tags. A run that records no user is the account's that first mirrored it, as MLflow has
    it for a run it started (and MLflow takes the run's user from its tags at creation): a later export by
    someone else leaves it."""
    tags = {k: v for k, v in mirror.tags.items() if k != SOURCE_TAG}
    if MLFLOW_USER not in tags and (found is None or MLFLOW_USER not in found.data.tags):
        from stacks.tracking.client import exporting_user

        tags[MLFLOW_USER] = exporting_user()
    return tags


def _write_files(client, bucket: Bucket, mirror: Mirror, mlflow_run_id: str) -> None:
    with tempfile.TemporaryDirectory(prefix="trainstack-mirror-") as tmp:
        for name in mirror.files:
            local = Path(tmp) / name
            local.parent.mkdir(parents=True, exist_ok=True)
            bucket.download(run_key(mirror.lang, mirror.run_id, name), local)
            folder = str(PurePosixPath(name).parent)
            client.log_artifact(mlflow_run_id, str(local), artifact_path=None if folder == "." else folder)


def export_run(tracker, bucket: Bucket, mirror: Mirror) -> Exported:
    """Create or complete the MLflow run of one trainstack run (`mirror`: record.read_mirror); MLflow's
    errors propagate as client.TrackerCallFailed, naming the object and the experiment. A run that has ended
    is marked so right after it is created or found: a write refused later leaves it ended (with its figures,
    files or model missing until the next export completes it), never RUNNING."""
    from stacks.tracking.client import doing

    lang, run_id, client = mirror.lang, mirror.run_id, tracker.client
    where = f"in experiment {tracker.experiment_name!r}"
    with doing(f"looking up the run of {lang} {run_id} {where}"):
        found = tracker.find(run_id, lang)
    if found is not None and found.data.tags.get(SOURCE_TAG) == mirror.source_sha:
        return Exported(lang, run_id, "unchanged", found.info.run_id)
    if found is None:
        with doing(f"creating the run of {lang} {run_id} {where}"):
            client.create_run(
                tracker.experiment_id, start_time=mirror.start_ms, run_name=mirror.name, tags=_run_tags(mirror, None)
            )
            mlflow_run_id = tracker.find(run_id, lang).info.run_id  # the oldest, if a retried create made two
    else:
        mlflow_run_id = found.info.run_id
    the_run = f"run {mlflow_run_id} ({lang} {run_id}) {where}"
    with doing(f"setting the status of {the_run}"):
        _write_status(client, mlflow_run_id, mirror, found)
    with doing(f"writing the params, tags and figures of {the_run}"):
        _write_values(client, mlflow_run_id, mirror, found)
        _write_datasets(client, mlflow_run_id, mirror, found)
    with doing(f"uploading the files of {the_run}"):
        _write_files(client, bucket, mirror, mlflow_run_id)
    if mirror.model and (found is None or MODEL_TAG not in found.data.tags):
        from stacks.tracking.model import log_model

        # after the final figures: logged at their step, the model takes them as its own metrics; the model's
        # tags say which code it carries (trainstack.code_origin: the run's own, or this checkout's)
        with doing(f"logging the model of {the_run}"):
            client.set_tag(mlflow_run_id, MODEL_TAG, log_model(tracker, bucket, mirror, mlflow_run_id))
    with doing(f"marking {the_run} complete"):
        client.set_tag(mlflow_run_id, SOURCE_TAG, mirror.source_sha)  # last: the mirror is complete
    return Exported(lang, run_id, "created" if found is None else "updated", mlflow_run_id)


def _write_status(client, mlflow_run_id: str, mirror: Mirror, found) -> None:
    """The run's MLflow status and end as the bucket has them (an ended run's, before anything else is
    written); a FAILED run resumed under the same id is RUNNING again."""
    if mirror.end_ms is not None:
        if found is not None and found.info.status == mirror.mlflow_status and found.info.end_time == mirror.end_ms:
            return
        from stacks.tracking.client import quiet

        with quiet():  # it prints links to the run on stdout
            client.set_terminated(mlflow_run_id, status=mirror.mlflow_status, end_time=mirror.end_ms)
    elif found is not None and found.info.status != "RUNNING":
        client.update_run(mlflow_run_id, status="RUNNING")
