"""What a command prints of the tracker's mirror (stacks.tracking): the runs mirrored, the aliases moved, and
what it missed with the command that catches up."""

from __future__ import annotations

from rich.markup import escape

from stacks.cli.common import console, err_console


def say_mirrored(config, result) -> None:
    """What a mirror made along a command's own work did: the runs mirrored, the aliases moved, and in one
    warning what it missed with the command that catches up."""
    from stacks import tracking

    settings = tracking.mlflow_settings(config)
    if result.exported:
        console.print(
            f"mirrored to MLflow {settings.uri} (experiment {tracking.experiment_name(config)}): "
            + ", ".join(f"{e.lang} {e.run_id}" for e in result.exported),
            soft_wrap=True,
            markup=False,
        )
    for code, version in result.champions.items():
        console.print(
            f"MLflow registry: {settings.registered_model.replace('{lang}', code)} version {version} "
            f"is @{settings.alias}",
            soft_wrap=True,
            markup=False,
        )
    say_unreadable(result)
    if result.missed:
        names = ", ".join(f"{lang} {run_id}" for lang, run_id in result.missed)
        err_console.print(
            f"warning: not mirrored to MLflow ({escape(result.reason or 'refused')}): {escape(names)}; "
            f"catch up: {tracking.catch_up(config, result.missed)}",
            soft_wrap=True,
            markup=True,
        )


def say_unreadable(result) -> None:
    for lang, run_id, why in result.unreadable:
        err_console.print(
            f"warning: {lang} {run_id} not mirrored: its run folder cannot be read ({escape(why)})", soft_wrap=True
        )
