"""`trainctl lm import | list | use`: a language's base language models (`<lang>/lm/<lm-id>/`, `<lang>/lm/CURRENT`).

Nothing heavy at import time: torch and fastai load only inside `lm import`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from stacks.cli.common import EnvOpt, LangArg, SetOpt, console, emit_json, fail, load
from stacks.errors import ExitStatus
from trainer.params import Job

app = typer.Typer(help="Base language models per language", no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (stable keys, see the README)")]
SMALL_NOTE = "small base LM: expect weak transfer"


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="lm")


@app.command("pretrain")
def pretrain(
    lang: LangArg,
    env: EnvOpt = "local",
    sets: SetOpt = None,
    detach: Annotated[bool, typer.Option("--detach", help="return once the stack is applied")] = False,
):
    """Pretrain a base LM on <lang>/data/corpus/ (GPU on gcp), publish <lang>/lm/<id>/ and point CURRENT at it.

    Apply, follow, destroy as `trainctl train`; the run checkpoints and resumes the same way.
    Epochs, arch and batch size come from trainer.epochs_base_lm, emb_sz/n_hid/n_layers, bs."""
    from stacks.cli.run_view import run_command

    run_command([lang], env, sets, detach, job=Job.PRETRAIN_LM)


def _open(env: str, sets, lang: str):
    """(config, the language's settings, bucket); the language must be configured."""
    from stacks.runs.language_run import language_settings
    from trainer.storage import open_bucket

    _, config = load(env, sets)
    settings = language_settings(config, lang)
    return config, settings, open_bucket(config.bucket)


def _tokenizer_spec(kind: str, code: str, sp_model: Path | None):
    from trainer.text.tokenizers import SENTENCEPIECE, SPACY, TokenizerSpec, spacy_spec

    if kind == SPACY:
        if sp_model is not None:
            fail("--sp-model goes with --tokenizer sentencepiece", None, ExitStatus.BAD_INPUT)
        return spacy_spec(code)
    if kind != SENTENCEPIECE:
        fail(f"unknown tokenizer {kind!r}", "use --tokenizer spacy or --tokenizer sentencepiece", ExitStatus.BAD_INPUT)
    if sp_model is None or not sp_model.is_file():
        fail(
            "--tokenizer sentencepiece needs the SentencePiece model the LM was trained with",
            "pass it: --sp-model PATH/TO/spm.model",
            ExitStatus.BAD_INPUT,
        )
    return TokenizerSpec(SENTENCEPIECE, code, sp_model.read_bytes())


@app.command("import")
def import_(
    lang: LangArg,
    weights: Annotated[Path, typer.Argument(help="fastai AWD-LSTM language-model weights (.pth state dict)")],
    vocab: Annotated[Path, typer.Argument(help="its vocabulary: a pickled list of str (e.g. itos_wt103.pkl)")],
    env: EnvOpt = "local",
    sets: SetOpt = None,
    tokenizer: Annotated[
        str,
        typer.Option(
            "--tokenizer", help="how the LM's texts were tokenized: spacy (the language's code) | sentencepiece"
        ),
    ] = "spacy",
    sp_model: Annotated[
        Path | None, typer.Option("--sp-model", help="the SentencePiece model (with --tokenizer sentencepiece)")
    ] = None,
    note: Annotated[str, typer.Option("--note", help="where the files came from (recorded in meta.json)")] = "",
    backward: Annotated[
        Path | None,
        typer.Option(
            "--backward",
            help="the backward LM's weights, same vocabulary and arch (e.g. fastai's WT103 "
            "lstm_bwd.pth), for trainer.bidirectional",
        ),
    ] = None,
    backward_vocab: Annotated[
        Path | None,
        typer.Option(
            "--backward-vocab",
            help="the backward LM's own vocabulary file, if it came with one: checked to be the forward one's",
        ),
    ] = None,
):
    """Check and publish existing fastai ULMFiT weights as <lang>/lm/imp-<hash>/, and make it CURRENT."""
    _require_trainer_extra()
    from trainer.lm.importer import import_lm

    _, settings, bucket = _open(env, sets, lang)
    spec = _tokenizer_spec(tokenizer, settings.code or lang, sp_model)
    d = settings.data
    lm, report = import_lm(
        bucket,
        lang,
        weights,
        vocab,
        tokenizer=spec,
        source_note=note,
        text_col=d.text_col,
        label_col=d.label_col,
        label_sep=d.label_sep,
        label_cols=tuple(d.label_cols),
        task=d.task,
        backward=backward,
        backward_vocab=backward_vocab,
    )
    _print_imported(bucket, lang, lm, report)
    _print_current(settings, lang, lm.id, spec.kind)


def _require_trainer_extra() -> None:
    """`lm import` loads the weights with torch and fastai: say how to install them rather than fail on an import."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("fastai") is None:
        fail(
            escape("`trainctl lm import` needs the trainer extra: pip install 'trainstack[trainer]'"),
            None,
            ExitStatus.BAD_INPUT,
        )


def _print_imported(bucket, lang: str, lm, report) -> None:
    """Where the base LM is, its arch, vocabulary and tokenizer, its coverage of the data, and the import's warnings."""
    where = bucket.url(f"{lang}/lm/{lm.id}/")
    done = "published" if report.published else "already published (nothing rewritten)"
    console.print(f"base LM {lm.id} {done}: {where}", soft_wrap=True, markup=False)
    a = lm.arch
    console.print(
        f"  arch emb_sz={a['emb_sz']} n_hid={a['n_hid']} n_layers={a['n_layers']} · vocabulary "
        f"{lm.vocab_size:,} tokens · tokenizer {lm.tokenizer}" + (" · with a backward LM" if lm.backward else ""),
        soft_wrap=True,
        markup=False,
    )
    console.print(f"  {report.coverage.describe()}", soft_wrap=True, markup=False)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)


def _print_current(settings, lang: str, lm_id: str, kind: str) -> None:
    """CURRENT's new target, and whether the language's training runs can fine-tune from it: they skip a base LM
    tokenized otherwise than trainer.tokenizer (`auto` resolved) says."""
    runs_use = settings.trainer.tokenizer
    if runs_use == "auto":
        from trainer.text.languages import default_tokenizer

        runs_use = default_tokenizer(settings.code or lang)
    if runs_use != kind:
        console.print(
            f"[yellow]warning:[/] training runs of {lang} tokenize with {runs_use} (trainer.tokenizer), "
            f"this base LM with {kind}: runs skip a base LM made with another tokenizer",
            soft_wrap=True,
        )
    uses = f": training runs of {lang} fine-tune from it" if runs_use == kind else ""
    console.print(f"{lang}/lm/CURRENT now points at {lm_id}{uses}", soft_wrap=True, markup=False)


def _row(lm, current: str | None) -> dict:
    return {**asdict(lm), "current": lm.id == current, "small": lm.small}


@app.command("list")
def list_(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None, as_json: JsonOpt = False):
    """Published base LMs of a language (oldest first) and which one training runs use (CURRENT)."""
    from stacks.cli.run_console import print_table
    from trainer.lm import store

    _, _, bucket = _open(env, sets, lang)
    damaged: list[tuple[str, str]] = []
    lms, current = store.list_lms(bucket, lang, unreadable=damaged), store.current_id(bucket, lang)
    if as_json:
        emit_json(
            [_row(lm, current) for lm in lms]
            + [{"id": lm_id, "current": lm_id == current, "unreadable": why} for lm_id, why in damaged]
        )
        return
    for lm_id, why in damaged:  # one damaged record is a line, never the whole list
        console.print(
            f"[yellow]UNREADABLE[/] {escape(lm_id)}: {escape(why)} (the others are listed; publish it "
            "again or remove its folder)",
            soft_wrap=True,
        )
    if not lms:
        console.print(
            f"no base LM published for {lang} in {bucket.url(lang + '/lm/')} "
            f"(trainctl lm pretrain {lang}, or trainctl lm import {lang} WEIGHTS VOCAB)",
            soft_wrap=True,
            markup=False,
        )
        return
    table = Table(title=f"base LMs of {lang} in {bucket.url(lang + '/lm/')} (* = CURRENT)")
    for col in ("current", "id", "source", "tokens read", "perplexity", "arch", "tokenizer", "age", "note"):
        table.add_column(col, no_wrap=col in ("id", "arch", "age"))
    for lm in lms:
        table.add_row(
            "*" if lm.id == current else "",
            lm.id,
            lm.source,
            (f"{lm.tokens:,}" if lm.tokens is not None else "?")
            + (f" of {lm.corpus_tokens:,}" if (lm.corpus_tokens or 0) > (lm.tokens or 0) else ""),
            (f"{lm.perplexity:.1f}" if lm.perplexity is not None else "")
            + (f" / bwd {lm.backward_perplexity:.1f}" if lm.backward_perplexity is not None else ""),
            lm.arch_text(),
            escape(lm.tokenizer),
            lm.age(),
            SMALL_NOTE if lm.small else "",
        )
    if current and current not in {lm.id for lm in lms}:
        table.caption = f"CURRENT names {current}, which is not a complete base LM: trainctl lm use {lang} ID"
    print_table(table)


@app.command("use")
def use(
    lang: LangArg,
    lm_id: Annotated[str, typer.Argument(metavar="ID", help="base LM id (see `trainctl lm list`)")],
    env: EnvOpt = "local",
    sets: SetOpt = None,
):
    """Point <lang>/lm/CURRENT at a published base LM: later training runs of the language use it."""
    from trainer.lm import store

    _, _, bucket = _open(env, sets, lang)
    lm = store.set_current(bucket, lang, lm_id)
    console.print(f"{lang}/lm/CURRENT now points at {lm.describe()}", soft_wrap=True, markup=False)
    if lm.small:
        console.print(f"[yellow]warning:[/] {SMALL_NOTE} ({lm.tokens:,} tokens)", soft_wrap=True)
