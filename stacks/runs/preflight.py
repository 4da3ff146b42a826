"""Checks before anything is created or billed: the language is configured, its labelled data (or corpus)
reads as the trainer will read it, and the target's cost estimate (`report_preflight`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stacks.config import LanguageSettings
from stacks.targets import target_of
from trainer.data.labelled import LabelledData, load_labelled, unlabelled_key, unlabelled_texts
from trainer.params import Job
from trainer.runfiles.data_copy import RunDataBucket, read_record
from trainer.storage import Bucket

if TYPE_CHECKING:
    from stacks.runs.language_run import LanguageRun


def preflight_data(bucket: Bucket, lang: str, settings: LanguageSettings) -> LabelledData:
    """The trainer's own validation, run before anything is created or written."""
    import importlib.util

    from trainer.text.preflight import check_tokenizer

    d = settings.data
    data = load_labelled(
        bucket,
        lang,
        text_col=d.text_col,
        label_col=d.label_col,
        label_sep=d.label_sep,
        task=d.task,
        label_cols=tuple(d.label_cols),
    )[0]
    if (key := unlabelled_key(bucket, lang)) is not None:  # its text column, before a GPU VM finds it missing
        unlabelled_texts(bucket.read_bytes(key), key, text_col=d.text_col, source=bucket.url(key))
    try:
        has_trainer = importlib.util.find_spec("fastai") is not None
    except ValueError:  # a module set to None in sys.modules
        has_trainer = False
    if not has_trainer:
        # an operator install without the trainer extra (gcp runs train in the image)
        data.warnings.append(
            "tokenizer not checked before apply: this install lacks the trainer extra "
            "(pip install 'trainstack[trainer]' to check it here)"
        )
        return data
    from stacks.runs import tokenizer_memo
    from trainer.text.languages import default_tokenizer
    from trainer.text.preflight import SAMPLE_ROWS

    code, tokenizer = settings.code or lang, settings.trainer.tokenizer
    kind = default_tokenizer(code) if tokenizer == "auto" else tokenizer
    key = tokenizer_memo.key_of(kind, code, data.texts[:SAMPLE_ROWS])
    if tokenizer_memo.remembered(key) is None:
        # imports fastai/spaCy: seconds, but before any infrastructure
        tokenizer_memo.remember(key, check_tokenizer(lang, data.texts, code=settings.code, tokenizer=tokenizer))
    return data


def preflight_corpus(bucket: Bucket, lang: str, settings: LanguageSettings) -> str:
    """A base-LM job needs corpus files; returns a one-line summary, or a DataError (exit 2)."""
    from trainer.data.labelled import corpus_keys
    from trainer.errors import DataError

    keys = corpus_keys(bucket, lang)
    if not keys:
        raise DataError(
            f"no corpus at {bucket.url(f'{lang}/data/corpus/')} (.txt or .txt.gz, one text per line)",
            hint=f"stage it: trainctl data push {lang} FOLDER (holding corpus/*.txt[.gz])",
        )
    return f"corpus ok: {len(keys)} file(s) under {bucket.url(f'{lang}/data/corpus/')}"


def report_preflight(run: "LanguageRun", rep, *, resume: str | None = None) -> None:
    """The data (or corpus) check and, on gcp, the cost estimate: before anything is created or billed. A resumed
    run's data is its own copy (trainer.runfiles.data_copy), whatever was pushed since."""
    config, lang, settings, bucket = run.config, run.lang, run.settings, run.bucket
    bucket.check_access(f"{lang}/")  # no such bucket, no role on it: exit 2 now, not a "no train.csv" later
    own_copy = resume is not None and read_record(bucket, lang, resume) is not None
    data_bucket = RunDataBucket(bucket, lang, resume) if own_copy else bucket
    if own_copy:
        rep.info(f"run {resume} resumes on its own copy of its data, whatever was pushed since")
    if run.job == Job.CLASSIFIER:
        data = preflight_data(data_bucket, lang, settings)
        for warning in data.warnings:
            rep.warn(warning)
        rep.info(
            f"data ok: {len(data.texts)} rows, labels {', '.join(data.label_names)}"
            + (" (multi-label)" if data.multi_label else "")
        )
    else:
        rep.info(preflight_corpus(data_bucket, lang, settings))
    target_of(config).estimate(config, lang, bucket, rep)
