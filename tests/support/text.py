"""Texts for the trainer.text tests: odd strings, the sample rows as parsed, fastai's own tokens."""

from __future__ import annotations

from tests.support.project import SAMPLE
from trainer.data.labelled import parse_labelled_csv

ODD_TEXTS = [
    "Ça coûte 12,50 € — trop cher !!!",
    "",
    "   ",
    "ÉNORME problème avec ma COMMANDE",
    "emoji 🙂 et 日本語",
    "ligne\navec\r\nretours",
    "xxbos xxmaj déjà là",
    "a" * 3000,
]


def parse(raw: bytes):
    """A train.csv with the default columns (text, labels; ';' between labels)."""
    return parse_labelled_csv(raw, text_col="text", label_col="labels", label_sep=";", source="train.csv")


def sample_rows(lang: str = "fr"):
    return parse((SAMPLE / lang / "train.csv").read_bytes())


def sample_ids(rows):
    """The sample rows tokenized and remapped to their own vocabulary (min_freq 1)."""
    from trainer.text.tokens import build_vocab, remap, tokenize

    table = tokenize(rows.texts, "fr", workers=1)
    return remap(table, build_vocab([table], min_freq=1, max_vocab=60000))


def fastai_tokens(texts: list[str], lang: str = "fr") -> list[list[str]]:
    """Tokens of fastai's own pipeline with the trainer's rules (what an exported model.pth does)."""
    from fastai.text.all import Tokenizer, WordTokenizer

    from trainer.text.tokenizers import rules

    tok = Tokenizer(WordTokenizer(lang), rules=rules())
    return [list(tok(t)) for t in texts]
