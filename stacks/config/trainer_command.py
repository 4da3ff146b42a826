"""A language's `python -m trainer` command line, from the env's config: what the train stack starts on every
target, and what benchmarks start bare (no CDK needed to build it)."""

from __future__ import annotations

from stacks.config.models import EnvConfig


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
