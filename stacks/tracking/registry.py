"""The promoted model in MLflow's registry: a version of `trainstack-<env>-<lang>` per promoted run, and the
alias (`champion`) on the one `<lang>/models/CURRENT` names. The bucket decides; the registry follows it,
so a refused promotion changes nothing there and a catch-up export moves the alias where CURRENT points."""

from __future__ import annotations

from stacks.runs.promotion import read_current
from stacks.tracking.export import MODEL_TAG
from trainer.storage import Bucket


def model_name(template: str, lang: str) -> str:
    return template.replace("{lang}", lang)


def sync_champion(tracker, bucket: Bucket, lang: str, *, name: str, alias: str) -> int | None:
    """Point `alias` of `name` at the version of the promoted run (registered when it has none) ->
    the version, or None when nothing is promoted or its run is not mirrored with a model yet."""
    current = read_current(bucket, lang)
    if current is None:
        return None
    found = tracker.find(current["run_id"], lang)
    if found is None or MODEL_TAG not in found.data.tags:
        return None
    from stacks.tracking.client import doing

    client, mlflow_run_id = tracker.client, found.info.run_id
    with doing(f"reading the versions of registered model {name!r}"):
        versions = client.search_model_versions(f"name = '{name}' and run_id = '{mlflow_run_id}'")
    if versions:
        version = int(versions[0].version)
    else:
        import mlflow

        from stacks.tracking.client import fluent_uris, quiet

        with (
            doing(f"registering {lang} {current['run_id']} as a version of registered model {name!r}"),
            quiet(),
            fluent_uris(tracker),
        ):  # it announces itself on stdout and the log
            created = mlflow.register_model(
                found.data.tags[MODEL_TAG],
                name,
                tags={
                    "trainstack.run_id": current["run_id"],
                    "trainstack.lang": lang,
                    "macro_f1": f"{current['macro_f1']:.4f}",
                },
            )
        version = int(created.version)
    try:
        holder = client.get_model_version_by_alias(name, alias)
    except Exception:  # no version holds the alias yet
        holder = None
    if holder is None or int(holder.version) != version:
        with doing(f"moving alias {alias!r} of registered model {name!r} to version {version}"):
            client.set_registered_model_alias(name, alias, str(version))
    return version
