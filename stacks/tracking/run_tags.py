"""The tags a mirrored run carries beyond its figures: MLflow's own fields (so the UI's User, Source, Git commit
and run name read as for a run MLflow started), where and on what it trained, and the base LM it started from.
Pure translation from the run files' dicts (record.py reads them); stdlib only.
"""

from __future__ import annotations

from trainer.storage import Bucket

TAG = "trainstack."  # every tag of ours starts so; `trainstack.run_id` finds a run's mirror

# MLflow's own tag names (mlflow/utils/mlflow_tags.py), spelled out so that this module needs no MLflow:
# with them the UI fills its User, Source, Git commit and run-name fields as for a run MLflow started.
MLFLOW_USER = "mlflow.user"
MLFLOW_SOURCE_PREFIX = "mlflow.source."
MLFLOW_SOURCE_NAME = "mlflow.source.name"
MLFLOW_SOURCE_TYPE = "mlflow.source.type"
MLFLOW_GIT_COMMIT = "mlflow.source.git.commit"
MLFLOW_RUN_NAME = "mlflow.runName"
MLFLOW_DOCKER_IMAGE_URI = "mlflow.docker.image.uri"
MLFLOW_DATASET_CONTEXT = "mlflow.data.context"

COMMANDS = {"classifier": "train", "pretrain-lm": "lm pretrain"}  # the trainctl command that starts each job


def system_tags(*, lang: str, run_id: str, job: str, trainctl_meta: dict, trainer_meta: dict) -> dict[str, str]:
    """MLflow's own fields: the run's name, the command that made it, its commit and image, its user where the
    run records one (else export.py names the exporting account when it creates the run)."""
    tags = {
        MLFLOW_RUN_NAME: f"{lang}-{run_id}",
        MLFLOW_SOURCE_TYPE: "JOB",
        MLFLOW_SOURCE_NAME: f"trainctl {COMMANDS.get(job, job)} {lang}",
    }
    recorded = {
        MLFLOW_GIT_COMMIT: trainctl_meta.get("git_sha"),
        MLFLOW_USER: trainctl_meta.get("user"),
        MLFLOW_DOCKER_IMAGE_URI: trainer_meta.get("image") or trainctl_meta.get("image"),
    }
    tags.update({name: str(value) for name, value in recorded.items() if value})
    return tags


CLOUD_MACHINE = ("machine_type", "gpu", "market", "nodes", "region", "zone")  # a target's VM; not a local run's


def machine_tags(trainctl_meta: dict, cost: dict, moves: dict, trainer_meta: dict | None = None) -> dict[str, str]:
    """Where and on what the run trained: a cloud target's machine as recorded at apply (metadata/trainctl.json)
    and as it moved (metadata/placements.json: the zone it last ran in); a local run's CPU and cores as the
    trainer saw them (metadata/trainer.json), and no cloud machine (which a run's trainctl.json recorded whatever
    its target before a language's gcp settings had their own block)."""
    trainer_meta = trainer_meta or {}
    target = trainctl_meta.get("target")
    gpu = trainctl_meta.get("gpu") or {}
    gpus = (
        f"{gpu['type']} x{gpu.get('count') or 1}"
        if gpu.get("type")
        else ("none" if trainctl_meta.get("machine_type") else None)
    )
    values = {
        "target": target,
        "machine_type": trainctl_meta.get("machine_type"),
        "gpu": gpus,
        "market": {True: "spot", False: "on-demand"}.get(trainctl_meta.get("spot")),
        "nodes": trainctl_meta.get("nodes"),
        "region": trainctl_meta.get("region"),
        "zone": (moves["ran_in"] or [None])[-1] or trainctl_meta.get("zone"),
        "cost_note": cost.get("cost_note"),
        "device": trainer_meta.get("device"),
        "cpu": trainer_meta.get("cpu"),
        "cores": trainer_meta.get("cores"),
    }
    if target == "local":
        values = {name: value for name, value in values.items() if name not in CLOUD_MACHINE}
    tags = {f"{TAG}{name}": str(value) for name, value in values.items() if value is not None}
    if moves["placements"] and target != "local":
        tags[f"{TAG}placements"] = " -> ".join(str(z) for z in moves["placements"])
    return tags


def folder_url(bucket: Bucket, prefix: str) -> str:
    return bucket.url(prefix).rstrip("/") + "/"  # a local bucket's URL drops the slash, a gs:// one keeps it


def _published_lm(bucket: Bucket, lang: str, lm_id: str):
    """The base LM's meta.json as published (None: removed since, or unreadable)."""
    from trainer.lm import store

    try:
        return store.read(bucket, lang, lm_id)
    except Exception:  # a damaged meta.json costs the link, never the mirror
        return None


def base_lm_tags(bucket: Bucket, lang: str, base_lm: dict) -> dict[str, str]:
    """The base LM the run started from: its id and source, where it is, and the run that pretrained it."""
    if not base_lm.get("id"):
        return {f"{TAG}base_lm": "none"}
    from trainer.lm import store

    lm_id = str(base_lm["id"])
    published = _published_lm(bucket, lang, lm_id)
    values = {
        "": lm_id,
        ".source": base_lm.get("source") or (published.source if published else None),
        ".uri": folder_url(bucket, store.prefix(lang, lm_id)),
        ".run_id": base_lm.get("run_id") or (published.run_id if published else None),
    }
    return {f"{TAG}base_lm{suffix}": str(value) for suffix, value in values.items() if value}
