"""`trainctl data push`: stage labelled data, corpus and base LM files in the bucket (the work: stacks.datasets)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from stacks.cli.common import EnvOpt, LangArg, SetOpt, console, emit_json, json_on_stdout, load

app = typer.Typer(help="Stage data in the environment's bucket.", no_args_is_help=True)

PushJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help=(
            "print JSON on stdout once staged, the lines on stderr: {lang, bucket, files, replaced, active_runs, "
            "warnings}; "
            "files: one {source, key, url, kind, action, backup, rows, labels, texts, lines} per file (kind: "
            "labelled, unlabelled or corpus; action: uploaded or unchanged; backup: where the version it replaced "
            "is kept, else null; rows: labelled files' {total, kept, dropped, skipped: {why: count}}; labels: their "
            "label count; texts: an unlabelled file's; lines: a corpus file's); replaced: {key, backup} of another "
            "format's file removed; active_runs: one {run_id, state, trains_on} per active run of the language "
            "(trains_on: own copy, the data it started with; or this push, for a run that has not read its data yet)"
        ),
    ),
]


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="data")


class ConsoleListener:
    """A push's lines on the console (stderr with --json), its uploads on a FileProgress."""

    def say(self, line: str) -> None:
        console.print(line, markup=False, soft_wrap=True)

    def warn(self, text: str) -> None:
        console.print(f"[yellow]warning:[/] {escape(text)}", soft_wrap=True)

    def progress(self, total_bytes: int):
        from stacks.cli.file_progress import FileProgress

        return FileProgress(total_bytes)


@app.command("push")
def push(
    lang: LangArg,
    # \[: rich reads a bare "[valid.* test.*]" as a markup tag and drops it from the help
    path: Annotated[
        Path,
        typer.Argument(
            help="train.csv|.jsonl|.parquet, or a folder with train.* "
            "\\[valid.* test.*], corpus/*.txt[.gz], "
            "unlabelled.csv|.jsonl|.parquet|.txt[.gz]"
        ),
    ],
    env: EnvOpt = "local",
    sets: SetOpt = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="replace differing files (old ones are kept under data/previous/)")
    ] = False,
    as_json: PushJsonOpt = False,
):
    """Validate and upload a language's data to <bucket>/<lang>/: a line per file staged (and on a terminal a
    bar of the bytes staged)."""
    from stacks.datasets.push import push_data
    from stacks.runs.language_run import language_settings

    _, config = load(env, sets)
    settings = language_settings(config, lang)
    with json_on_stdout(as_json):
        # the wall clock, read here, names the folder that keeps replaced versions
        report = push_data(
            lang,
            path,
            data_settings=settings.data,
            bucket_uri=config.bucket,
            replace=replace,
            listener=ConsoleListener(),
            now=lambda: datetime.now(timezone.utc),
        )
    if as_json:
        emit_json(report.document(lang))
