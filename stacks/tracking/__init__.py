"""The team's tracker as a mirror of the bucket: MLflow runs, the logged model, the registry's alias.

record.py turns a run folder into what MLflow shows (pure; the tags beyond its figures in run_tags.py),
client.py opens the server quick to give up, export.py writes a run idempotently, model.py logs the pyfunc
model, registry.py moves the alias to the promoted run, after_run.py mirrors along the commands that make runs.
The bucket stays the source of truth: a tracker that is down costs one line and a catch-up command
(`trainctl runs export`), never a run or an exit status.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from stacks.errors import TrackerUnavailable

CHAMPION = "models/CURRENT"  # in `missed`: the language's alias could not be moved to its promoted run
# One mirror at a time in a process: logging a model points MLflow's process-wide URIs at the tracker
# (client.fluent_uris), and a training command mirrors each run from its own worker thread as it ends.
_ONE_MIRROR_AT_A_TIME = threading.Lock()


@dataclass
class MirrorResult:
    exported: list = field(default_factory=list)  # export.Exported, in the order asked
    champions: dict[str, int] = field(default_factory=dict)  # lang -> the registered version the alias names
    missed: list[tuple[str, str]] = field(default_factory=list)  # (lang, run id) not mirrored
    reason: str | None = None  # why they were not
    unreadable: list[tuple[str, str, str]] = field(default_factory=list)  # (lang, run id, why): its folder
    reached: bool = True  # False: the server could not be opened at all (`reason` says why)


def merged(parts: list[MirrorResult]) -> MirrorResult:
    """Several mirrors (a command's runs, each mirrored as it ended) as one, in the order given."""
    whole = MirrorResult()
    for part in parts:
        whole.exported += part.exported
        whole.champions.update(part.champions)
        whole.missed += part.missed
        whole.unreadable += part.unreadable
        whole.reason = whole.reason or part.reason
        whole.reached = whole.reached and part.reached
    return whole


def _from_env(name: str) -> str | None:
    return os.environ.get(name) or None


def mlflow_settings(config):
    """The env's MLflow settings when tracking is on, else None: the config's, where it leaves the server or
    the experiment unset MLflow's own variables (MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME), and the
    registered model's `{env}` filled in (its `{lang}` is each language's, registry.model_name)."""
    settings = config.tracking.mlflow
    uri = settings.uri or _from_env("MLFLOW_TRACKING_URI")
    if not uri:
        return None
    model = settings.registered_model.replace("{env}", config.env)
    return settings.model_copy(update={"uri": uri, "experiment": experiment_name(config), "registered_model": model})


def registry_uri() -> str | None:
    """Where the registry is when it is not on the tracking server (MLflow's MLFLOW_REGISTRY_URI)."""
    return _from_env("MLFLOW_REGISTRY_URI")


def experiment_name(config) -> str:
    configured = config.tracking.mlflow.experiment
    return configured or _from_env("MLFLOW_EXPERIMENT_NAME") or f"trainstack-{config.env}"


def catch_up(config, missed: list[tuple[str, str]]) -> str:
    """The command that mirrors what was missed."""
    langs = sorted({lang for lang, _ in missed})
    named = [run_id for _, run_id in missed if run_id != CHAMPION]
    runs = " ".join(named) if len(langs) == 1 and len(named) == len(missed) else ""
    return " ".join(
        part
        for part in ("trainctl runs export", langs[0] if len(langs) == 1 else "", runs, f"--env {config.env}")
        if part
    )


def mirror(config, bucket, runs: list[tuple[str, str]], *, champions: list[str] = ()) -> MirrorResult:
    """Mirror `runs` ((lang, run id) pairs) and move the alias of each language in `champions` to its
    promoted run. The first call the server refuses ends the mirror: the rest is `missed`, with the reason.
    Raises nothing but TrackerUnavailable when tracking is off is not asked for (check mlflow_settings).
    Safe from any thread: mirrors wait for each other."""
    with _ONE_MIRROR_AT_A_TIME:
        return _mirror(config, bucket, runs, champions)


def _mirror(config, bucket, runs: list[tuple[str, str]], champions) -> MirrorResult:
    from stacks.tracking.client import open_tracker, why
    from stacks.tracking.export import export_run
    from stacks.tracking.record import read_mirror
    from stacks.tracking.registry import model_name, sync_champion

    settings = mlflow_settings(config)
    result = MirrorResult()
    try:
        tracker = open_tracker(settings.uri, settings.experiment, registry_uri=registry_uri())
    except TrackerUnavailable as exc:
        result.missed, result.reason, result.reached = list(runs), exc.reason, False
        return result
    for index, (lang, run_id) in enumerate(runs):
        try:
            record = read_mirror(bucket, lang, run_id, env=config.env)
        except Exception as exc:  # the run's folder (a half-written file, storage): that run alone is skipped
            result.unreadable.append((lang, run_id, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
            continue
        try:
            result.exported.append(export_run(tracker, bucket, record))
        except Exception as exc:  # the server went away or refused mid-way: the rest waits for a catch-up
            result.missed, result.reason = list(runs[index:]), why(exc)
            return result
    for lang in dict.fromkeys(champions):
        try:
            version = sync_champion(
                tracker, bucket, lang, name=model_name(settings.registered_model, lang), alias=settings.alias
            )
        except Exception as exc:
            result.reason = result.reason or why(exc)
            result.missed.append((lang, CHAMPION))
            continue
        if version is not None:
            result.champions[lang] = version
    return result
