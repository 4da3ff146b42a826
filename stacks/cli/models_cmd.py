"""`trainctl promote | predict`: which model of a language is live, and classifying with it."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from stacks.cli.common import EnvOpt, LangArg, SetOpt, console, err_console, fail, mapped_errors
from stacks.cli.common import open_env
from stacks.cli.runs_cmds import RunOpt
from stacks.runs.records import pick_run
from stacks.errors import ExitStatus, TrainstackError

RunArg = Annotated[str, typer.Argument(help="run id (see `trainctl runs`)")]


def register(app: typer.Typer) -> None:
    app.command("promote")(promote)
    app.command("predict")(predict)


@mapped_errors
def promote(lang: LangArg, run_id: RunArg, env: EnvOpt = "local", sets: SetOpt = None,
            force: Annotated[bool, typer.Option("--force", help="promote even if it scores below the promoted "
                                                "model, or was scored on other rows")] = False):
    """Make RUN the model `predict` uses for LANG (<lang>/models/CURRENT; earlier promotions kept).
    Refuses a run that did not succeed, and one below the promoted model's macro-F1 on the same rows."""
    from stacks.runs.promotion import promote as write_promotion

    config, bucket = open_env(env, sets, lang, configured=False)
    pick_run(bucket, lang, run_id)
    record = write_promotion(bucket, lang, run_id, force=force)
    replaced = f"; replaces run {record['replaces']}" if record["replaces"] else ""
    console.print(f"promoted run {run_id} for {lang}: macro-F1 {record['macro_f1']:.3f} on {record['n_rows']} "
                  f"{record['scored_rows']} rows ({record['model']}){' (forced)' if force else ''}{replaced}",
                  soft_wrap=True)
    console.print(f"  {bucket.url(f'{lang}/models/CURRENT')} · `trainctl predict {lang}` uses it", soft_wrap=True,
                  markup=False)
    from stacks.cli.export_cmd import mirror_finished

    mirror_finished(config, bucket, [(lang, run_id)], champions=[lang])  # the registry's alias follows CURRENT


def _served_model(bucket, lang: str, run_id: str, tmp: Path, *, forward_only: bool):
    """The run's served model (trainer.serving.served_model), from its files downloaded to `tmp`: only those
    it serves (model_bwd.pth for its ensemble, tfidf.json/.npz for a kept blend)."""
    from trainer.runfiles.status_file import BWD_MODEL, TFIDF_FILES, read_metrics, run_key
    from trainer.serving.served_model import MODEL, ServedModel, UnservableRun

    metrics = read_metrics(bucket, lang, run_id)
    wanted = [MODEL, *([BWD_MODEL] if metrics.ensemble is not None and not forward_only else []),
              *(TFIDF_FILES if metrics.blended else [])]
    files = {}
    for name in wanted:
        if name == MODEL or bucket.exists(run_key(lang, run_id, name)):  # no model.pth: the bucket says so
            bucket.download(run_key(lang, run_id, name), tmp / name)
            files[name] = tmp / name
    try:
        model = ServedModel.load(files=files, metrics=metrics, forward_only=forward_only)
    except UnservableRun as exc:
        if exc.file is None:
            raise  # a part missing: the message says which
        cause = exc.__cause__
        raise TrainstackError(
            f"{bucket.url(run_key(lang, run_id, exc.file))} cannot be loaded as a model "
            f"({type(cause).__name__}: {cause})",
            hint=f"serve another run: trainctl predict {lang} --run RUN (trainctl runs --lang {lang}), "
                 f"or retrain: trainctl train {lang}") from exc
    if model.ensemble:
        err_console.print(f"[dim]run {escape(run_id)}: forward+backward ensemble "
                          "(--forward-only: model.pth alone)[/]")
    return model


@mapped_errors
def predict(lang: LangArg, texts: Annotated[list[str] | None, typer.Argument(help="texts to classify")] = None,
            env: EnvOpt = "local", sets: SetOpt = None, run: RunOpt = None,
            input_file: Annotated[str | None, typer.Option("--input", help="a CSV, JSON Lines or Parquet file to "
                                                           "classify (a path, or a gs:// / file:// URI)")] = None,
            output_file: Annotated[str | None, typer.Option("--output", help="where --input's labels and "
                                                            "probabilities go (format from the name)")] = None,
            text_col: Annotated[str | None, typer.Option("--text-col", help="--input's text column "
                                                         "(default: the language's data.text_col)")] = None,
            id_col: Annotated[str | None, typer.Option("--id-col", help="--input's id column (default: `id` if "
                                                       "present, else the row number)")] = None,
            batch_rows: Annotated[int, typer.Option("--batch-rows", min=1, help="rows per batch")] = 1024,
            forward_only: Annotated[bool, typer.Option(
                "--forward-only", help="a bidirectional run: model.pth alone, not the forward+backward ensemble")] = False):
    """Classify texts, or a whole file (--input/--output), with the promoted model of LANG (default;
    else the newest successful run; --run picks one)."""
    if bool(texts) == bool(input_file):
        fail("give texts or --input FILE, not both" if texts else "nothing to classify",
             f"e.g. trainctl predict {lang} \"some text\", or --input texts.csv --output labels.csv",
             ExitStatus.BAD_INPUT)
    if input_file and not output_file:
        fail("--input needs --output FILE (CSV, JSON Lines or Parquet, by its name)",
             f"e.g. trainctl predict {lang} --input {escape(input_file)} --output labels.csv",
             ExitStatus.BAD_INPUT)
    if input_file:
        from stacks.cli.predict_file import check_files

        check_files(input_file, output_file)  # before the model loads: that takes seconds
    config, bucket = open_env(env, sets, lang, configured=False)
    from stacks.runs.promotion import serving_run

    run_id, note = serving_run(bucket, lang, run)
    if note:
        err_console.print(f"[dim]{escape(note)}[/]", soft_wrap=True)
    with tempfile.TemporaryDirectory(prefix="trainctl-predict-") as tmp:
        model = _served_model(bucket, lang, run_id, Path(tmp), forward_only=forward_only)
        if input_file:
            from stacks.cli.predict_file import classify_file_cmd

            data = config.language(lang).data if lang in config.languages else config.defaults.data
            classify_file_cmd(model, input_file, output_file, text_col=text_col or data.text_col, id_col=id_col,
                              batch_rows=batch_rows, label_sep=data.label_sep, tmp=Path(tmp))
            return
        chosen, probs = model.predict(texts)
        for text, labels, row in zip(texts, chosen, probs):
            shown = ", ".join(f"{label} {value:.2f}" for label, value in zip(model.labels, row))
            console.print(f"[bold]{escape(';'.join(labels))}[/]\t{escape(text)}\n  [dim]{shown}[/]")
