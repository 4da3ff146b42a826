"""The served model's spaCy ids: text cut into pieces as spaCy cuts it, each piece tokenized once, give
fastai's tokens and Numericalize's ids (unknown tokens 0), whatever the whitespace."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

pytest.importorskip("spacy")

ODD = [
    " ",
    "  ",
    "\n",
    "\t",
    " \n ",
    "\u00a0",
    "\u2003",
    "\r\n",
    "!!!",
    "...",
    "(",
    ")",
    "'",
    "-",
    "€",
    "😀",
    "http://x.fr/a?b=1",
    "l'été",
    "A.B.",
    "xxmaj",
    "xxbos",
    "xxup ÉTÉ",
    "e-mail",
    "3,5",
    "aujourd'hui",
]
WORDS = ["colis", "livraison", "Facture", "COMPTE", "produit", "n'est", "pas", "arrivé", "(3)", "rembourser"]


def varied_texts(count: int) -> list[str]:
    rng = random.Random(3)
    texts = ["", " ", "  a", " a", "\n", "a ", "a  ", " \n", "\n a", "xxbos", "a\u00a0 b"]
    while len(texts) < count:
        parts = [rng.choice(ODD) if rng.random() < 0.4 else rng.choice(WORDS) for _ in range(rng.randint(1, 10))]
        texts.append(rng.choice(["", " ", "  ", "\n"]).join(parts))
    return texts


@pytest.fixture(scope="module")
def fastai_tokenizer():
    from fastai.text.core import Tokenizer, WordTokenizer

    from trainer.text.tokenizers import rules

    return Tokenizer(WordTokenizer("fr"), rules=rules())


def test_pieces_tokenize_as_the_whole_text(fastai_tokenizer):
    from fastai.text.core import compose

    from trainer.serving.spacy_ids import pieces

    tokenize = fastai_tokenizer.tok.pipe.__self__.tokenizer
    apply_rules = compose(*fastai_tokenizer.rules)
    for text in varied_texts(1500):
        for ruled in (text, apply_rules(text)):  # the raw text too: whitespace the rules would have removed
            whole = [token.text for token in tokenize(ruled)]
            assert [token.text for piece in pieces(ruled) for token in tokenize(piece)] == whole, repr(ruled)


def test_ids_are_numericalizes(fastai_tokenizer):
    from fastai.text.core import compose

    from trainer.serving.spacy_ids import SpacyIds

    apply_rules = compose(*fastai_tokenizer.rules)
    texts = varied_texts(800)
    vocab = ["xxunk", "xxpad", "xxbos", "xxmaj", "xxup", "colis", "(", "3", ")", "\n", "'", "été", "l'", "-"]
    vocab_ids = defaultdict(int, {token: n for n, token in enumerate(vocab)})
    spacy_ids = SpacyIds(fastai_tokenizer.tok, vocab_ids)
    got = [row.tolist() for row in spacy_ids.ids([apply_rules(text) for text in texts])]
    assert got == [[vocab_ids[token] for token in fastai_tokenizer(text)] for text in texts]
    again = spacy_ids.ids([apply_rules(text) for text in texts])  # now from the remembered pieces
    assert got == [row.tolist() for row in again]
