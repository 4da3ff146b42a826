"""`trainctl runs export`: mirror runs into the env's MLflow server (a catch-up of the mirror the commands that
make runs do as they go: stacks.tracking.after_run)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.markup import escape

from stacks.cli.common import EnvOpt, SetOpt, checked_run_ids, console, emit_json, fail, json_on_stdout, open_env
from stacks.cli.mirror_view import say_unreadable
from stacks.errors import ExitStatus, TrackerUnavailable


def register(runs_app: typer.Typer) -> None:
    runs_app.command("export")(export)


def _since(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text).strftime("%Y%m%d")
    except ValueError:
        fail(f"--since {text!r} is not a date", "write it as YYYY-MM-DD", ExitStatus.BAD_INPUT)


ExportJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help=(
            "print JSON on stdout, messages on stderr: {tracker, experiment, reason, runs, champions, "
            "champions_missed}; runs: one {lang, run_id, action, mlflow_run_id, error} per run asked (action: "
            "created, updated, unchanged, missed = the tracker failed before it, unreadable = its run folder could "
            "not be read; `error` says why); champions: {lang: the registered version the alias names}; reason: why "
            "the tracker failed, else null. Also printed when runs were missed (exit 3) or unreadable (exit 2)"
        ),
    ),
]


def export(
    lang: Annotated[str | None, typer.Argument(help="only this language (default: every language)")] = None,
    run_ids: Annotated[
        list[str] | None, typer.Argument(callback=checked_run_ids, help="only these runs of LANG")
    ] = None,
    env: EnvOpt = "local",
    sets: SetOpt = None,
    since: Annotated[
        str | None, typer.Option("--since", help="only runs started on or after this date (YYYY-MM-DD, UTC)")
    ] = None,
    as_json: ExportJsonOpt = False,
):
    """Mirror runs into the env's MLflow server (tracking.mlflow): one MLflow run per run, found again by
    its run id, so exporting twice changes nothing; also moves the registry's alias to each language's
    promoted run. For detached runs, runs made before tracking was set, or a tracker that was down.
    A tracker that cannot be reached is exit 3, even with nothing to export."""
    from stacks import tracking
    from stacks.runs.records import bucket_languages
    from stacks.runs.records import run_ids as list_runs

    day = _since(since)
    config, bucket = open_env(env, sets, lang, configured=False)
    settings = tracking.mlflow_settings(config)
    if settings is None:
        fail(
            f"env {env} mirrors runs nowhere: tracking.mlflow.uri is not set",
            f"set it in envs/{env}.yaml, or: --set tracking.mlflow.uri=http://HOST:5000",
            ExitStatus.BAD_INPUT,
        )
    if run_ids and not lang:
        fail("runs named without a language", "trainctl runs export LANG RUN...", ExitStatus.BAD_INPUT)
    langs = [lang] if lang else sorted(bucket_languages(bucket))
    wanted = [
        (code, run_id)
        for code in langs
        for run_id in (run_ids or list_runs(bucket, code))
        if day is None or run_id[:8] >= day
    ]
    missing = [run_id for run_id in run_ids or [] if run_id not in list_runs(bucket, lang)]
    if missing:
        fail(
            f"no run {', '.join(missing)} of {lang} in {config.bucket}",
            f"see: trainctl runs --lang {lang} --env {env}",
            ExitStatus.BAD_INPUT,
        )
    with json_on_stdout(as_json):
        from stacks.cli.transfer_progress import TransferReport
        from stacks.tracking.model import reporting_transfers

        with reporting_transfers(TransferReport()):  # a model logged says its sizes and times
            result = tracking.mirror(config, bucket, wanted, champions=langs)
        if as_json:
            emit_json(_document(config, settings, wanted, result))
        _say_exported(config, settings, result)
    # Unreached is an error with nothing to export too: the env's tracker is broken, and later runs meet it.
    if result.missed or not result.reached:
        raise TrackerUnavailable(
            settings.uri,
            result.reason or "refused",
            hint=(
                f"{len(result.missed)} not mirrored; once it answers: {tracking.catch_up(config, result.missed)}"
                if result.missed
                else "nothing to export yet: check that the server is up and "
                f"tracking.mlflow.uri in envs/{env}.yaml (or --set tracking.mlflow.uri=...), "
                f"then: trainctl runs export --env {env}"
            ),
        )
    if result.unreadable:
        fail(
            f"{len(result.unreadable)} run folder(s) could not be read (above); every other run is mirrored",
            "fix or remove those folders' files, then export again",
            ExitStatus.BAD_INPUT,
        )


def _say_exported(config, settings, result) -> None:
    from stacks import tracking

    if result.reached:
        counts = {
            action: sum(1 for e in result.exported if e.action == action)
            for action in ("created", "updated", "unchanged")
        }
        console.print(
            f"MLflow {settings.uri}, experiment {tracking.experiment_name(config)}: "
            f"{counts['created']} created, {counts['updated']} updated, "
            f"{counts['unchanged']} unchanged",
            soft_wrap=True,
        )
    for code, version in result.champions.items():
        console.print(
            f"  {code}: {settings.alias} -> {escape(settings.registered_model.replace('{lang}', code))} "
            f"version {version}",
            soft_wrap=True,
        )
    say_unreadable(result)


def _document(config, settings, wanted: list[tuple[str, str]], result) -> dict:
    """`runs export --json`: what became of each run asked (keys in the --json help)."""
    from stacks import tracking

    exported = {(e.lang, e.run_id): e for e in result.exported}
    unreadable = {(code, run_id): why for code, run_id, why in result.unreadable}
    runs = []
    for code, run_id in wanted:
        done = exported.get((code, run_id))
        action = done.action if done else "unreadable" if (code, run_id) in unreadable else "missed"
        runs.append(
            {
                "lang": code,
                "run_id": run_id,
                "action": action,
                "mlflow_run_id": done.mlflow_run_id if done else None,
                "error": unreadable.get((code, run_id)) or (result.reason if action == "missed" else None),
            }
        )
    return {
        "tracker": settings.uri,
        "experiment": tracking.experiment_name(config),
        "reason": result.reason,
        "runs": runs,
        "champions": result.champions,
        "champions_missed": [code for code, run_id in result.missed if run_id == tracking.CHAMPION],
    }
