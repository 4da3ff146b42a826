"""`trainctl runs export`: mirror runs into the env's MLflow server, and the line a training command prints
when its mirror could not be written."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.markup import escape

from stacks.cli.common import EnvOpt, SetOpt, console, err_console, fail, mapped_errors, open_env
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


@mapped_errors
def export(lang: Annotated[str | None, typer.Argument(help="only this language (default: every language)")] = None,
           run_ids: Annotated[list[str] | None, typer.Argument(help="only these runs of LANG")] = None,
           env: EnvOpt = "local", sets: SetOpt = None,
           since: Annotated[str | None, typer.Option("--since", help="only runs started on or after this date "
                                                     "(YYYY-MM-DD, UTC)")] = None):
    """Mirror runs into the env's MLflow server (tracking.mlflow): one MLflow run per run, found again by
    its run id, so exporting twice changes nothing; also moves the registry's alias to each language's
    promoted run. For detached runs, runs made before tracking was set, or a tracker that was down."""
    from stacks import tracking
    from stacks.runs.records import bucket_languages, run_ids as list_runs

    day = _since(since)
    config, bucket = open_env(env, sets, lang, configured=False)
    settings = tracking.mlflow_settings(config)
    if settings is None:
        fail(f"env {env} mirrors runs nowhere: tracking.mlflow.uri is not set",
             f"set it in envs/{env}.yaml, or: --set tracking.mlflow.uri=http://HOST:5000", ExitStatus.BAD_INPUT)
    if run_ids and not lang:
        fail("runs named without a language", "trainctl runs export LANG RUN...", ExitStatus.BAD_INPUT)
    langs = [lang] if lang else sorted(bucket_languages(bucket))
    wanted = [(code, run_id) for code in langs for run_id in (run_ids or list_runs(bucket, code))
              if day is None or run_id[:8] >= day]
    missing = [run_id for run_id in run_ids or [] if run_id not in list_runs(bucket, lang)]
    if missing:
        fail(f"no run {', '.join(missing)} of {lang} in {config.bucket}", f"see: trainctl runs --lang {lang} --env {env}",
             ExitStatus.BAD_INPUT)
    result = tracking.mirror(config, bucket, wanted, champions=langs)
    counts = {action: sum(1 for e in result.exported if e.action == action) for action in ("created", "updated", "unchanged")}
    console.print(f"MLflow {settings.uri}, experiment {tracking.experiment_name(config)}: "
                  f"{counts['created']} created, {counts['updated']} updated, {counts['unchanged']} unchanged", soft_wrap=True)
    for code, version in result.champions.items():
        console.print(f"  {code}: {settings.alias} -> {escape(settings.registered_model.replace('{lang}', code))} "
                      f"version {version}", soft_wrap=True)
    _say_unreadable(result)
    if result.missed:
        raise TrackerUnavailable(settings.uri, result.reason or "refused",
                                 hint=f"{len(result.missed)} not mirrored; once it answers: "
                                      f"{tracking.catch_up(config, result.missed)}")
    if result.unreadable:
        fail(f"{len(result.unreadable)} run folder(s) could not be read (above); every other run is mirrored",
             "fix or remove those folders' files, then export again", ExitStatus.BAD_INPUT)


def _say_unreadable(result) -> None:
    for lang, run_id, why in result.unreadable:
        err_console.print(f"warning: {lang} {run_id} not mirrored: its run folder cannot be read ({escape(why)})",
                          soft_wrap=True)


def mirror_finished(config, bucket, runs: list[tuple[str, str]], *, champions: list[str] = ()) -> None:
    """After a training command: mirror its runs when tracking is on; a tracker that fails costs one line."""
    from stacks import tracking

    if not runs or tracking.mlflow_settings(config) is None:
        return
    settings = tracking.mlflow_settings(config)
    result = tracking.mirror(config, bucket, runs, champions=champions)
    if result.exported:
        console.print(f"mirrored to MLflow {settings.uri} (experiment {tracking.experiment_name(config)}): "
                      + ", ".join(f"{e.lang} {e.run_id}" for e in result.exported), soft_wrap=True, markup=False)
    for code, version in result.champions.items():
        console.print(f"MLflow registry: {settings.registered_model.replace('{lang}', code)} version {version} "
                      f"is @{settings.alias}", soft_wrap=True, markup=False)
    _say_unreadable(result)
    if result.missed:
        names = ", ".join(f"{lang} {run_id}" for lang, run_id in result.missed)
        err_console.print(f"warning: not mirrored to MLflow ({escape(result.reason or 'refused')}): {escape(names)}; "
                          f"catch up: {tracking.catch_up(config, result.missed)}", soft_wrap=True, markup=True)
