"""Runs as trainctl reads them back: every language's run folders, their state, VMs and cost.

Read-only over the bucket layout of trainer/runfiles/keys.py (stdlib only): `<lang>/runs/<run-id>/status.json`,
`metadata/trainctl.json` (written at apply); a gcp run's VM boot records: stacks/targets/gcp/cost.py.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from stacks.errors import RunNotFoundError
from trainer.runfiles.curves import after_run_figures
from trainer.runfiles.events import after_run_key, scalar_events
from trainer.runfiles.keys import PLACEMENTS_META, TRAINCTL_META, run_key
from trainer.runfiles.placements import placements_summary
from trainer.runfiles.readers import RunFileError, read_json, read_metrics
from trainer.runfiles.restarts import read_restarts
from trainer.runfiles.status_file import read_status
from trainer.runfiles.timestamps import parse_time
from trainer.storage import Bucket

if TYPE_CHECKING:  # the config models take ~0.3 s to import: `trainctl --help` reads this module
    from stacks.config import EnvConfig

STARTING = "STARTING"  # applied, no status.json yet (the VM or process is still starting)
UNKNOWN = "UNKNOWN"  # no status.json and too old to be starting: it never started
UNREADABLE = "UNREADABLE"  # a run file there but damaged (truncated, not JSON): named in the row's error
COST_META = "metadata/cost.json"


def bucket_languages(bucket: Bucket) -> list[str]:
    """Every language with a `<lang>/runs/` folder in the bucket, configured or not."""
    return [lang for lang in bucket.folders("") if bucket.folders(f"{lang}/runs/")]


def run_ids(bucket: Bucket, lang: str) -> list[str]:
    """Every run folder of a language, oldest first, including runs without a status.json yet."""
    return bucket.folders(f"{lang}/runs/")


def run_state(bucket: Bucket, lang: str, run_id: str, config: EnvConfig) -> tuple[str, object | None]:
    """(state, RunStatus or None): STARTING for a run applied moments ago without a status yet."""
    from stacks.runs.watch import live_state

    status = read_status(bucket, lang, run_id)
    if status is not None:
        return status.state, status
    from stacks.targets import target_of

    return live_state(bucket, lang, run_id, target_of(config).status_appear_timeout_s) or UNKNOWN, None


def run_cost(bucket: Bucket, config: EnvConfig, lang: str, run_id: str, status) -> dict:
    """The run's machines and estimated cost (USD), as its target reckons them (local runs cost 0)."""
    from stacks.targets import target_of

    return target_of(config).run_cost(bucket, config, lang, run_id, status)


def duration_s(status) -> float | None:
    if status is None or not status.started_at:
        return None
    end = parse_time(status.finished_at or status.updated_at)
    start = parse_time(status.started_at)
    return (end - start).total_seconds() if end and start else None


def run_row(bucket: Bucket, config: EnvConfig, lang: str, run_id: str) -> dict:
    """One run as `trainctl runs --json` prints it (keys documented in the README); a run whose files cannot
    be read is listed UNREADABLE with the file named, and the listing goes on."""
    try:
        state, status = run_state(bucket, lang, run_id, config)
        metrics = read_metrics(bucket, lang, run_id)
    except RunFileError as exc:
        return {
            "run_id": run_id,
            "lang": lang,
            "configured": lang in config.languages,
            "state": UNREADABLE,
            "stage": None,
            "started_at": None,
            "finished_at": None,
            "duration_s": None,
            "macro_f1": None,
            "tfidf_macro_f1": None,
            "kept": None,
            "scored_rows": None,
            "resumed": 0,
            "restarts": 0,
            **placements_summary(None),
            "error": str(exc),
            "url": bucket.url(f"{lang}/runs/{run_id}"),
            **run_cost(bucket, config, lang, run_id, None),
        }
    return {
        "run_id": run_id,
        "lang": lang,
        "configured": lang in config.languages,
        "state": state,
        "stage": status.stage if status else None,
        "started_at": status.started_at if status else None,
        "finished_at": status.finished_at if status else None,
        "duration_s": duration_s(status),
        "macro_f1": metrics.macro_f1 if metrics else None,
        "tfidf_macro_f1": metrics.tfidf_macro_f1 if metrics else None,
        "kept": metrics.kept if metrics and metrics.model is not None else None,
        "scored_rows": metrics.scored_rows if metrics else None,
        "resumed": status.resumed if status else 0,
        "restarts": len(read_restarts(bucket, lang, run_id)),  # after failures not the code's (some of resumed)
        **placements_summary(read_json(bucket, run_key(lang, run_id, PLACEMENTS_META))),
        "error": status.error if status else None,
        "url": bucket.url(f"{lang}/runs/{run_id}"),
        **run_cost(bucket, config, lang, run_id, status),
    }


def record_cost(bucket: Bucket, config: EnvConfig, lang: str, run_id: str) -> dict:
    """Write metadata/cost.json (billed VM time and the estimate) once a run has ended, and its figures (with
    the Spot time) to the run's TensorBoard, at the step MLflow's mirror logs them (the last epoch's)."""
    cost = run_cost(bucket, config, lang, run_id, read_status(bucket, lang, run_id))
    bucket.write_bytes(run_key(lang, run_id, COST_META), json.dumps(cost, indent=2).encode())
    estimate = (read_json(bucket, run_key(lang, run_id, TRAINCTL_META)) or {}).get("cost_estimate") or {}
    moves = placements_summary(read_json(bucket, run_key(lang, run_id, PLACEMENTS_META)))
    step = len((read_json(bucket, run_key(lang, run_id, "metrics.json")) or {}).get("history") or [])
    figures = after_run_figures(cost, estimate, moves)
    bucket.write_bytes(after_run_key(lang, run_id), scalar_events(figures, step))
    return cost


def pick_run(bucket: Bucket, lang: str, run_id: str | None, *, succeeded: bool = False) -> str:
    """`run_id` if the language has it, else its newest (successful) run; RunNotFoundError (exit 2) else."""
    from trainer.runfiles.status_file import SUCCEEDED

    ids = run_ids(bucket, lang)
    if run_id:
        if run_id not in ids:
            raise RunNotFoundError(f"no run {run_id!r} for {lang}", hint=f"list them: trainctl runs --lang {lang}")
        if succeeded and (s := read_status(bucket, lang, run_id)) is not None and s.state != SUCCEEDED:
            raise RunNotFoundError(
                f"run {run_id} of {lang} is {s.state}: it has no model to use"
                + (f" ({s.error.splitlines()[0][:160]})" if s.error else ""),
                hint=f"pick a successful one: trainctl runs --lang {lang}",
            )
        return run_id
    if succeeded:
        ids = [i for i in ids if (s := read_status(bucket, lang, i)) and s.state == SUCCEEDED]
    if not ids:
        raise RunNotFoundError(
            f"no {'successful ' if succeeded else ''}run for {lang} in {bucket.uri}",
            hint=f"start one: trainctl train {lang}",
        )
    return ids[-1]


def find_run(bucket: Bucket, run_id: str, lang: str | None) -> str:
    """The language of a run id (searched in every language unless given)."""
    langs = [lang] if lang else bucket_languages(bucket)
    found = [code for code in langs if run_id in run_ids(bucket, code)]
    if not found:
        raise RunNotFoundError(f"no run {run_id!r} in {bucket.uri}", hint="list them: trainctl runs")
    return found[0]
