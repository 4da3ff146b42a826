"""A language's run as every target's launcher reads it (RunSpec) and its `python -m trainer` command line, from the
env's config: what the train stack starts on every target, and what benchmarks start bare (no CDK needed)."""

from __future__ import annotations

from stacks.config.models import EnvConfig
from trainer.launchers.run_spec import RunSpec


def run_spec(config: EnvConfig, lang: str) -> RunSpec:
    """The language's run from the settings every target shares (its run id: RunSpec.for_run, at synth)."""
    s = config.language(lang)
    return RunSpec(
        env=config.env,
        lang=lang,
        bucket=config.bucket,
        trainer_args=tuple(trainer_args(config, lang)),
        nodes=s.nodes,
        spot=s.spot,
        rung=s.rung,
        max_run_hours=s.max_run_hours,
        max_restarts=s.max_restarts,
        max_restarts_on_errors=s.max_restarts_on_errors,
        restart_on_exit_codes=tuple(s.restart_on_exit_codes),
    )


def trainer_args(config: EnvConfig, lang: str) -> list[str]:
    """The `python -m trainer` arguments of a language, except --run-id."""
    s = config.language(lang)
    return [
        "--lang",
        lang,
        "--lang-code",
        s.code or lang,
        "--bucket",
        config.bucket,
        "--env",
        config.env,
        "--text-col",
        s.data.text_col,
        "--label-col",
        s.data.label_col,
        "--label-sep",
        s.data.label_sep,
        "--task",
        s.data.task,
        *(arg for col in s.data.label_cols for arg in ("--label-cols", col)),
        *s.trainer.as_cli_args(),
    ]
