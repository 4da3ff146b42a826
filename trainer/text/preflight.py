"""Tokenize a sample of the real data with the run's tokenizer before anything is applied.

A language spaCy does not know, or one whose tokenizer needs a package the install
lacks, would otherwise fail inside the run — on gcp after a GPU VM booted and pulled
the image. Here it is a DataError (exit 2) that says what to set or install.
"""
from __future__ import annotations

from trainer.errors import DataError

SAMPLE_ROWS = 50
# spaCy languages whose tokenizer needs extra packages, and what to install.
EXTRA_PACKAGES = {"ja": "sudachipy sudachidict-core", "zh": "jieba (spacy-pkuseg for pkuseg)",
                  "th": "pythainlp", "ko": "mecab-ko / natto-py", "vi": "pyvi", "ru": "pymorphy3",
                  "uk": "pymorphy3 pymorphy3-dicts-uk"}
COMMON_MISTAKES = {"gr": "el", "jp": "ja", "cn": "zh", "kr": "ko", "ua": "uk", "cz": "cs", "dk": "da", "se": "sv"}


def check_tokenizer(lang: str, texts: list[str]) -> int:
    """Tokens of the first SAMPLE_ROWS texts (a positive count), or a DataError naming the fix."""
    import warnings

    from trainer.text import worker

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch/fastai import-time deprecation notices, not the user's concern
            worker.init(lang, ignore_signals=False)
            _, ids, _ = worker.tokenize_chunk(texts[:SAMPLE_ROWS])
    except Exception as exc:
        text = str(exc)
        if "E048" in text or "Can't import language" in text:
            better = COMMON_MISTAKES.get(lang)
            raise DataError(f"{lang!r} is not a language code spaCy knows",
                            hint=(f"the ISO 639-1 code is probably {better!r}: name the language {better}"
                                  if better else "name the language by its ISO 639-1 code (e.g. de, el, ja)")) from exc
        if isinstance(exc, ImportError):
            extra = EXTRA_PACKAGES.get(lang, "the package the error names")
            raise DataError(f"the {lang!r} tokenizer cannot load here: {exc}",
                            hint=f"install {extra} in the trainer's environment (and image)") from exc
        raise DataError(f"the {lang!r} tokenizer failed on a sample of the data: {type(exc).__name__}: {exc}",
                        hint="this language's spaCy tokenizer does not work with fastai's rules here; "
                             "a SentencePiece tokenizer is planned for such languages") from exc
    if not len(ids):
        raise DataError(f"the {lang!r} tokenizer made no tokens from a sample of the data",
                        hint="check the text column")
    return int(len(ids))
