"""Tokenize a sample of the real data with the run's tokenizer before anything is applied.

A language spaCy does not know, or one whose tokenizer needs a package the install
lacks, would otherwise fail inside the run — on gcp after a GPU VM booted and pulled
the image. Here it is a DataError (exit 2) that says what to set or install.
"""

from __future__ import annotations

from trainer.errors import DataError
from trainer.text.languages import COMMON_MISTAKES, EXTRA_PACKAGES, default_tokenizer

SAMPLE_ROWS = 50


def _sample_spec(kind: str, code: str, texts: list[str]):
    """The run's tokenizer, or for SentencePiece one trained on the sample (proves the package works)."""
    from trainer.text.tokenizers import SENTENCEPIECE, TokenizerSpec, spacy_spec, train_sentencepiece

    if kind != SENTENCEPIECE:
        return spacy_spec(code)
    return TokenizerSpec(SENTENCEPIECE, code, train_sentencepiece(texts, vocab_size=100, code=code))


def check_tokenizer(key: str, texts: list[str], *, code: str | None = None, tokenizer: str = "auto") -> int:
    """Tokens of the first SAMPLE_ROWS texts (a positive count), or a DataError naming the fix.

    `key` is the language's name in the config; `code` its ISO code (default: the key)."""
    import warnings

    from trainer.text import worker

    code = code or key
    kind = default_tokenizer(code) if tokenizer == "auto" else tokenizer
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch/fastai import-time deprecation notices, not the user's concern
            worker.init(_sample_spec(kind, code, texts[:SAMPLE_ROWS]), ignore_signals=False)
            _, ids, _ = worker.tokenize_chunk(texts[:SAMPLE_ROWS])
    except Exception as exc:
        text = str(exc)
        if "E048" in text or "Can't import language" in text:
            better = COMMON_MISTAKES.get(code)
            raise DataError(
                f"{code!r} is not a language code spaCy knows",
                hint=(
                    f"the ISO 639-1 code is probably {better!r}: set languages.{key}.code: {better}"
                    if better
                    else f"set languages.{key}.code to its ISO 639-1 code (e.g. de, el, ja)"
                    f", or languages.{key}.trainer.tokenizer: sentencepiece"
                ),
            ) from exc
        if isinstance(exc, ImportError):
            extra = EXTRA_PACKAGES.get(code, "the package the error names") if kind == "spacy" else "sentencepiece"
            raise DataError(
                f"the {kind} tokenizer for {code!r} cannot load here: {exc}",
                hint=f"install {extra} in the trainer's environment (and image), or set "
                f"languages.{key}.trainer.tokenizer: sentencepiece",
            ) from exc
        raise DataError(
            f"the {kind} tokenizer for {code!r} failed on a sample of the data: {type(exc).__name__}: {exc}",
            hint=f"set languages.{key}.trainer.tokenizer: sentencepiece"
            if kind == "spacy"
            else "the message is SentencePiece's own; run with --debug for the trace, or set "
            f"languages.{key}.trainer.tokenizer: spacy if spaCy knows the language",
        ) from exc
    if not len(ids):
        raise DataError(
            f"the {kind} tokenizer for {code!r} made no tokens from a sample of the data", hint="check the text column"
        )
    return int(len(ids))
