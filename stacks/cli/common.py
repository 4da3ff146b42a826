"""Shared options, the console, and the one place that maps errors to exit codes."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from stacks.errors import ExitStatus, TrainstackError
from trainer.errors import ERROR_MARK, HINT_MARK, error_text

# Without a terminal (CI logs, `| tee`, `> run.log`, scripts) lines are never wrapped, so a
# path or URI copied from the output is whole; rich already leaves out colour codes there.
NO_TTY_WIDTH = 1_000_000


class OperatorConsole(Console):
    """A rich console that wraps at the terminal's width on a terminal, and nowhere otherwise."""

    @property
    def size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)
        return size if self.is_terminal else ConsoleDimensions(NO_TTY_WIDTH, size.height)

    @size.setter
    def size(self, new_size) -> None:
        Console.size.fset(self, new_size)


console = OperatorConsole(highlight=False)
err_console = OperatorConsole(stderr=True, highlight=False)
STATE = {"debug": False}
DEBUG_FLAG, DEBUG_ENV = "--debug", "TRAINCTL_DEBUG"

EnvOpt = Annotated[str, typer.Option("--env", "-e", envvar="TRAINCTL_ENV", help="environment (envs/<env>.yaml)")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override a config key: key.path=value (repeatable)")]
LangArg = Annotated[str, typer.Argument(help="language code, e.g. fr")]


def checked_run_ids(param: typer.CallbackParam, value):
    """Every option and argument that takes a run id (one, several or none): each checked where it enters
    (trainer.runfiles.run_ids.check_run_id), before any config, bucket or stack is touched; exit 2 else."""
    from trainer.errors import RunIdError
    from trainer.runfiles.run_ids import check_run_id

    for run_id in [value] if isinstance(value, str) else value or []:
        where = param.opts[0] if param.param_type_name == "option" else param.name.upper()
        try:
            check_run_id(run_id)
        except RunIdError as exc:
            fail(f"{where}: {escape(exc.message)}", exc.hint, ExitStatus.BAD_INPUT)
    return value


RunOpt = Annotated[str | None, typer.Option("--run", callback=checked_run_ids, help="run id (default: the newest)")]
RunArg = Annotated[str, typer.Argument(callback=checked_run_ids, help="run id (see `trainctl runs`)")]


def refuse_undecodable(what: str, value: str) -> None:
    """An argument with bytes that are not UTF-8 (Python keeps them as surrogates): exit 2, naming the byte."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raw = os.fsencode(value)
        at = len(os.fsencode(value[: exc.start]))
        fail(
            f"{what} is not UTF-8: byte 0x{raw[at]:02x} at position {at + 1} of {escape(ascii(raw)[1:])}",
            "pass UTF-8 text: set the terminal's or the script's encoding to UTF-8 (e.g. LANG=C.UTF-8), or convert "
            "the text (iconv -f latin1 -t utf-8)",
            ExitStatus.BAD_INPUT,
        )


def decide_debug(args: list[str]) -> list[str]:
    """The one place that decides debug (tracebacks, Terraform's output): `--debug` anywhere before a `--`
    (after the command too: `trainctl status fr --debug`), or TRAINCTL_DEBUG set to anything but 0/false/no.
    -> the arguments without `--debug`, for the parser (no command declares it)."""
    end = args.index("--") if "--" in args else len(args)
    kept = [arg for arg in args[:end] if arg != DEBUG_FLAG] + args[end:]
    from_env = os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")
    STATE["debug"] = from_env or len(kept) < len(args)
    return kept


@contextlib.contextmanager
def json_on_stdout(as_json: bool):
    """--json: stdout carries the JSON document alone (emit_json); what the command says meanwhile (notes,
    progress, tables) goes to stderr, so `trainctl ... --json | jq` reads a whole document."""
    if not as_json:
        yield
        return
    console.stderr = True
    try:
        yield
    finally:
        console.stderr = False


def print_error(message: str, hint: str | None) -> None:
    """trainer.errors.error_text on stderr, its marks coloured (rich markup: a caller escapes what it quotes).
    Bytes of an argument that were not UTF-8 (surrogates) are shown as \\udcXX, never a failed write."""
    message, hint = (
        None if text is None else text.encode("utf-8", "backslashreplace").decode("utf-8") for text in (message, hint)
    )
    err_console.print(
        error_text(message, hint, marks=(f"[bold red]{ERROR_MARK}[/]", f"[dim]{HINT_MARK}[/]")), soft_wrap=True
    )


def fail(message: str, hint: str | None, code: int) -> None:
    print_error(message, hint)
    raise typer.Exit(code)


def check_output_file(
    option: str,
    path: Path,
    *,
    force: bool,
    example: str,
    exists_hint: str = "pass --force to replace it, or name another file",
) -> None:
    """A file the command will write, checked before any work: a file (`example`: a name to suggest) in a
    folder that exists, and no file already there unless `force` (else `exists_hint` says what to do)."""
    if path.is_dir():
        fail(
            f"{option} {escape(str(path))} is a folder",
            f"name a file in it, e.g. {option} {escape(str(path / example))}",
            ExitStatus.BAD_INPUT,
        )
    if not path.parent.is_dir():
        fail(
            f"{option} {escape(str(path))}: no folder {escape(str(path.parent))}",
            f"create it (mkdir -p {escape(str(path.parent))}), or name a file in a folder that exists",
            ExitStatus.BAD_INPUT,
        )
    if path.exists() and not force:
        fail(f"{option} {escape(str(path))} exists", exists_hint, ExitStatus.BAD_INPUT)


def describe_error(exc: BaseException) -> tuple[str, str | None, int]:
    """(message, hint, exit code) of an exception: the one place errors become what the user reads."""
    from trainer.errors import DataError
    from trainer.runfiles.readers import RunFileError
    from trainer.storage import StorageError

    if isinstance(exc, TrainstackError):
        return exc.message, exc.hint, exc.exit_status
    if isinstance(exc, DataError):
        return exc.message, exc.hint, ExitStatus.BAD_INPUT
    if isinstance(exc, RunFileError):
        return (
            str(exc),
            "the run's other files are as they were: look at the file, fix or remove it "
            "(`trainctl runs` shows the others)",
            ExitStatus.BAD_INPUT,
        )
    if isinstance(exc, StorageError):
        return (
            str(exc),
            exc.hint or storage_hint(exc),
            ExitStatus.BAD_INPUT if exc.bad_input else ExitStatus.INFRA_ERROR,
        )
    # Nothing above knows it: a bug in trainctl, not the user's mistake.
    return (
        f"unexpected {type(exc).__name__}: {exc}",
        "rerun as `trainctl --debug …` for the traceback, and report it with that output as an issue "
        "in the trainstack repository",
        ExitStatus.INFRA_ERROR,
    )


def storage_hint(exc) -> str:
    """What to do about a StorageError, for its bucket's own kind: a folder (file://), Cloud Storage (gs://), or
    another target's storage."""
    if exc.uri.startswith("file://"):
        path = escape(exc.uri.removeprefix("file://"))
        if exc.bad_input:
            return (
                "fix the folder's permissions, or point `bucket` at another folder (envs/ENV.yaml or "
                "--set bucket=file:///PATH); `trainctl doctor` checks it"
            )
        return f"look at the path (ls -l {path}) and its disk; `trainctl doctor` checks the bucket folder"
    if exc.bad_input:
        return (
            "fix `bucket` in the env's overlay (envs/ENV.yaml or --set bucket=...) or grant the role "
            "named; `trainctl doctor` checks both"
        )
    if exc.uri.startswith("gs://"):
        return "check the bucket URI and your credentials (gcloud auth application-default login)"
    return "check the bucket URI and that its storage can be reached with your credentials; `trainctl doctor` checks"


def exit_for(exc: BaseException) -> typer.Exit:
    """An exception no command handled, told as describe_error says (its traceback first with --debug; a Ctrl-C
    is one word) -> the Exit with its status. Called once, around every command (stacks.cli.main.RootCommand)."""
    if isinstance(exc, KeyboardInterrupt):
        err_console.print("interrupted")
        return typer.Exit(ExitStatus.INTERRUPTED)
    message, hint, status = described(exc)
    print_error(message, hint)
    return typer.Exit(status)


def described(exc: BaseException) -> tuple[str, str | None, int]:
    """describe_error, the traceback first on stderr with --debug (an error told where it was caught: the root's,
    or one language's of several)."""
    if STATE["debug"]:
        traceback.print_exception(exc, file=sys.stderr)
    return describe_error(exc)


def emit_json(data) -> None:
    """--json output: indented, keys as each command's --json help documents them (docs/cli.md)."""
    typer.echo(json.dumps(data, indent=2))


def load(env: str, sets: list[str] | None):
    from stacks.project import Project

    project = Project.discover()
    return project, project.load(env, list(sets or []))


def open_env(env: str, sets, lang: str | None, *, configured: bool = True):
    """(config, bucket); a language must be configured unless it has runs in the bucket."""
    from stacks.runs.language_run import language_settings
    from stacks.runs.records import bucket_languages
    from trainer.storage import open_bucket

    _, config = load(env, sets)
    bucket = open_bucket(config.bucket)
    if lang and (configured or lang not in bucket_languages(bucket)):
        language_settings(config, lang)
    return config, bucket
