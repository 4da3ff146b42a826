"""`trainctl promote | predict`: which model of a language is live, and classifying with it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from stacks.cli.common import (
    EnvOpt,
    LangArg,
    RunArg,
    RunOpt,
    SetOpt,
    console,
    emit_json,
    err_console,
    fail,
    json_on_stdout,
    open_env,
    refuse_undecodable,
)
from stacks.errors import ExitStatus, TrainstackError
from stacks.runs.records import pick_run


def register(app: typer.Typer) -> None:
    app.command("promote")(promote)
    app.command("predict")(predict)


PromoteJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help=(
            "print JSON on stdout once promoted, the lines on stderr (nothing on stdout when refused, exit 2): "
            "{env, lang, run_id, previous, macro_f1, scored_rows, n_rows, model, forced, unchanged, current, "
            "tracker}; previous: the run it replaces as the promoted model, else null; unchanged: RUN was the "
            "promoted model already (nothing written, exit 0); scored_rows: valid or test, n_rows of them; model: "
            "what predict serves (model.pth, the forward+backward ensemble, or a blend with TF-IDF); current: the "
            "URI of <lang>/models/CURRENT; tracker: null when the env mirrors nowhere, else {uri, registered_model, "
            "alias, version, error} (version: the registered version the alias now names, null when it was not "
            "moved; "
            "error: why not, else null)"
        ),
    ),
]


def promote(
    lang: LangArg,
    run_id: RunArg,
    env: EnvOpt = "local",
    sets: SetOpt = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="promote even if it scores below the promoted model, or was scored on other rows"),
    ] = False,
    as_json: PromoteJsonOpt = False,
):
    """Make RUN the model `predict` uses for LANG (<lang>/models/CURRENT; earlier promotions kept).
    Refuses a run that did not succeed, and one below the promoted model's macro-F1 on the same rows."""
    from stacks.cli.mirror_view import say_mirrored
    from stacks.cli.transfer_progress import TransferReport
    from stacks.runs.promotion import current_key
    from stacks.runs.promotion import promote as write_promotion
    from stacks.tracking.after_run import mirror_if_tracked
    from stacks.tracking.model import reporting_transfers

    config, bucket = open_env(env, sets, lang, configured=False)
    pick_run(bucket, lang, run_id)
    record = write_promotion(bucket, lang, run_id, force=force)
    current = bucket.url(current_key(lang))
    unchanged = bool(record.get("unchanged"))
    with json_on_stdout(as_json):
        replaced = f"; replaces run {record['replaces']}" if record["replaces"] else ""
        if unchanged:
            console.print(f"run {run_id} is already the promoted model of {lang}: nothing changed", soft_wrap=True)
        else:
            console.print(
                f"promoted run {run_id} for {lang}: macro-F1 {record['macro_f1']:.3f} on {record['n_rows']} "
                f"{record['scored_rows']} rows ({record['model']}){' (forced)' if force else ''}{replaced}",
                soft_wrap=True,
            )
        console.print(f"  {current} · `trainctl predict {lang}` uses it", soft_wrap=True, markup=False)
        # the registry's alias follows CURRENT; the run's first mirror logs its model (seconds to minutes)
        with reporting_transfers(TransferReport()):
            mirrored = mirror_if_tracked(config, bucket, [(lang, run_id)], champions=[lang])
        if mirrored is not None:
            say_mirrored(config, mirrored)
    if as_json:
        emit_json(
            {
                "env": config.env,
                "lang": lang,
                "run_id": run_id,
                "previous": record["replaces"],
                "macro_f1": record["macro_f1"],
                "scored_rows": record["scored_rows"],
                "n_rows": record["n_rows"],
                "model": record["model"],
                "forced": record["forced"],
                "unchanged": unchanged,
                "current": current,
                "tracker": _tracker_document(config, lang, mirrored),
            }
        )


def _tracker_document(config, lang: str, mirrored) -> dict | None:
    """promote --json's `tracker`: where the registry's alias went, or why it did not move (keys in the help)."""
    from stacks import tracking

    settings = tracking.mlflow_settings(config)
    if settings is None or mirrored is None:
        return None
    version = mirrored.champions.get(lang)
    unreadable = [why for code, _, why in mirrored.unreadable if code == lang]
    if version is not None:
        error = None
    elif mirrored.reason:  # the tracker refused or failed
        error = mirrored.reason
    elif unreadable:
        error = f"its run folder cannot be read ({unreadable[0]})"
    else:  # sync_champion found the run mirrored without a model
        error = "its MLflow run has no logged model"
    return {
        "uri": settings.uri,
        "registered_model": settings.registered_model.replace("{lang}", lang),
        "alias": settings.alias,
        "version": version,
        "error": error,
    }


def _served_model(bucket, lang: str, run_id: str, tmp: Path, *, forward_only: bool):
    """The run's served model (trainer.serving.served_model), from its files downloaded to `tmp`: only those
    it serves (model_bwd.pth for its ensemble, tfidf.json/.npz for a kept blend)."""
    from trainer.runfiles.keys import BWD_MODEL, TFIDF_FILES, run_key
    from trainer.runfiles.readers import read_metrics
    from trainer.serving.served_model import MODEL, ServedModel, UnservableRun

    metrics = read_metrics(bucket, lang, run_id)
    wanted = [
        MODEL,
        *([BWD_MODEL] if metrics.ensemble is not None and not forward_only else []),
        *(TFIDF_FILES if metrics.blended else []),
    ]
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
            f"or retrain: trainctl train {lang}",
        ) from exc
    if model.ensemble:
        err_console.print(f"[dim]run {escape(run_id)}: forward+backward ensemble (--forward-only: model.pth alone)[/]")
    return model


PredictJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help=(
            "print JSON on stdout, the lines and the progress bar on stderr: "
            "{env, lang, run_id, kept, ensemble, labels, "
            "no_label, empty_texts, ...}; kept: classifier or blend (with TF-IDF); ensemble: the forward+backward "
            "models were averaged; labels: {label: texts given it}, every label of the model in its order; no_label: "
            "texts given none (multi-label); empty_texts: texts empty or null (classified, and warned about). Texts: "
            "also predictions, one {text, labels, probabilities{label: p}} per text in order (labels: those "
            "decided). --input: also {input, output, rows, seconds}; rows: classified and written"
        ),
    ),
]


def predict(
    lang: LangArg,
    texts: Annotated[list[str] | None, typer.Argument(help="texts to classify")] = None,
    env: EnvOpt = "local",
    sets: SetOpt = None,
    run: RunOpt = None,
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input", help="a CSV, JSON Lines or Parquet file to classify (a path, or a gs:// / file:// URI)"
        ),
    ] = None,
    output_file: Annotated[
        str | None, typer.Option("--output", help="where --input's labels and probabilities go (format from the name)")
    ] = None,
    text_col: Annotated[
        str | None, typer.Option("--text-col", help="--input's text column (default: the language's data.text_col)")
    ] = None,
    id_col: Annotated[
        str | None, typer.Option("--id-col", help="--input's id column (default: `id` if present, else the row number)")
    ] = None,
    batch_rows: Annotated[int, typer.Option("--batch-rows", min=1, help="rows per batch")] = 1024,
    forward_only: Annotated[
        bool,
        typer.Option("--forward-only", help="a bidirectional run: model.pth alone, not the forward+backward ensemble"),
    ] = False,
    as_json: PredictJsonOpt = False,
):
    """Classify texts, or a whole file (--input/--output), with the promoted model of LANG (default;
    else the newest successful run; --run picks one)."""
    _check_predict_args(lang, texts, input_file, output_file, text_col, id_col)
    config, bucket = open_env(env, sets, lang, configured=False)
    run_id = _serving_run_id(bucket, lang, run)
    with tempfile.TemporaryDirectory(prefix="trainctl-predict-") as tmp, json_on_stdout(as_json):
        model = _served_model(bucket, lang, run_id, Path(tmp), forward_only=forward_only)
        served = {
            "env": config.env,
            "lang": lang,
            "run_id": model.run_id,
            "kept": model.metrics.kept,
            "ensemble": model.ensemble,
        }
        if input_file:
            data = config.language(lang).data if lang in config.languages else config.defaults.data
            summary = _classify_file(
                model, input_file, output_file, data, text_col=text_col, id_col=id_col, batch_rows=batch_rows, tmp=tmp
            )
            document = {**served, **summary}
        else:
            document = {**served, **_classify_texts(model, texts)}
    if as_json:
        emit_json(document)


def _check_predict_args(
    lang: str,
    texts: list[str] | None,
    input_file: str | None,
    output_file: str | None,
    text_col: str | None = None,
    id_col: str | None = None,
) -> None:
    """Texts or --input with --output, and both files usable: checked before the model loads (that takes seconds)."""
    if bool(texts) == bool(input_file):
        fail(
            "give texts or --input FILE, not both" if texts else "nothing to classify",
            f'e.g. trainctl predict {lang} "some text", or --input texts.csv --output labels.csv',
            ExitStatus.BAD_INPUT,
        )
    for n, text in enumerate(texts or [], 1):
        refuse_undecodable(f"text {n}", text)
    for option, value in (("--text-col", text_col), ("--id-col", id_col)):
        if value is not None:
            refuse_undecodable(option, value)
    if input_file and not output_file:
        fail(
            "--input needs --output FILE (CSV, JSON Lines or Parquet, by its name)",
            f"e.g. trainctl predict {lang} --input {escape(input_file)} --output labels.csv",
            ExitStatus.BAD_INPUT,
        )
    if input_file:
        from stacks.cli.predict_file import check_files

        check_files(input_file, output_file)


def _serving_run_id(bucket, lang: str, run: str | None) -> str:
    """The run predict serves: --run, else the promoted one, else the newest successful (said on stderr)."""
    from stacks.runs.promotion import serving_run

    run_id, note = serving_run(bucket, lang, run)
    if note:
        err_console.print(f"[dim]{escape(note)}[/]", soft_wrap=True)
    return run_id


def _classify_file(
    model,
    input_file: str,
    output_file: str,
    data,
    *,
    text_col: str | None,
    id_col: str | None,
    batch_rows: int,
    tmp: str,
) -> dict:
    """predict --input: classify the file into --output with the language's data settings (`data`);
    the summary its JSON document adds."""
    from stacks.cli.predict_file import classify_file_cmd

    return classify_file_cmd(
        model,
        input_file,
        output_file,
        text_col=text_col or data.text_col,
        id_col=id_col,
        batch_rows=batch_rows,
        label_sep=data.label_sep,
        tmp=Path(tmp),
    )


def _classify_texts(model, texts: list[str]) -> dict:
    """predict TEXT...: a line per text (its labels, then every label's probability); what its JSON document adds."""
    from stacks.cli.predict_file import LabelTally, warn_empty_texts

    tally = LabelTally(model.predict, model.labels)
    chosen, probs = tally(texts)
    empty = [n for n, text in enumerate(texts) if not text.strip()]
    warn_empty_texts(empty)
    for text, labels, row in zip(texts, chosen, probs):
        shown = ", ".join(f"{label} {value:.2f}" for label, value in zip(model.labels, row))
        console.print(f"[bold]{escape(';'.join(labels))}[/]\t{escape(text)}\n  [dim]{shown}[/]")
    return {
        "labels": dict(tally.counts),
        "no_label": tally.no_label,
        "empty_texts": len(empty),
        "predictions": [
            {"text": text, "labels": labels, "probabilities": dict(zip(model.labels, map(float, row)))}
            for text, labels, row in zip(texts, chosen, probs)
        ],
    }
