"""Language codes: which are valid, which tokenizer suits each, what a common wrong code meant.

Imported by the config loader (trainctl), so nothing heavy here: static tables, checked
against the installed spaCy by the tests.
"""

from __future__ import annotations

# ISO 639-1 two-letter codes (the 2023 list), plus the ISO 639-2/3 codes spaCy uses for
# languages without one (grc Ancient Greek, dsb/hsb Sorbian, kmr Kurmanji, lij Ligurian).
ISO_639_1 = frozenset(
    """
aa ab ae af ak am an ar as av ay az ba be bg bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el
en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu
ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na
nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so
sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
""".split()
)
OTHER_CODES = frozenset({"grc", "dsb", "hsb", "kmr", "lij", "xx"})  # xx: spaCy's multi-language tokenizer
KNOWN_CODES = ISO_639_1 | OTHER_CODES

# spaCy 3.8's spacy.lang packages (tests/e2e/test_languages.py compares this with the installed spaCy).
SPACY_CODES = frozenset(
    """
af am ar az bg bn bo ca cs da de dsb el en es et eu fa fi fo fr ga gd grc gu he hi hr hsb ht hu hy id is it ja
kmr kn ko ky la lb lg lij lt lv mk ml mr ms nb ne nl nn pl pt ro ru sa si sk sl sq sr sv ta te th ti tl tn tr tt
uk ur vi xx yo zh
""".split()
)

# SentencePiece by default: no spaces between words (ja zh th lo km my bo), or a spaCy
# tokenizer that needs a segmenter package (ja SudachiPy, zh jieba, th pythainlp, ko mecab-ko,
# vi pyvi); and every code spaCy has no tokenizer for.
SENTENCEPIECE_FIRST = frozenset({"ja", "zh", "th", "ko", "vi", "lo", "km", "my", "bo"})
EXTRA_PACKAGES = {
    "ja": "sudachipy sudachidict-core",
    "zh": "jieba",
    "th": "pythainlp",
    "ko": "mecab-ko / natto-py",
    "vi": "pyvi",
}

# Country or informal codes people type for a language.
# Codes that are not ISO 639-1, plus se (Northern Sami) and kr (Kanuri): valid, but sv and ko are meant far more often.
COMMON_MISTAKES = {
    "gr": "el",
    "jp": "ja",
    "cn": "zh",
    "kr": "ko",
    "ua": "uk",
    "cz": "cs",
    "dk": "da",
    "se": "sv",
    "gb": "en",
    "us": "en",
    "al": "sq",
    "rs": "sr",
    "by": "be",
    "vn": "vi",
    "il": "he",
    "ir": "fa",
    "pk": "ur",
    "in": "id",
    "iw": "he",
    "ji": "yi",
}


def default_tokenizer(code: str) -> str:
    """spacy where spaCy tokenizes the language without extra packages, else sentencepiece."""
    return "spacy" if code in SPACY_CODES and code not in SENTENCEPIECE_FIRST else "sentencepiece"


def check_code(code: str, *, key: str, tokenizer: str) -> str | None:
    """A problem with language `code` (of languages.<key>) for `tokenizer`, with the fix; None if fine."""
    if code not in KNOWN_CODES:
        better = COMMON_MISTAKES.get(code)
        fix = (
            f"the ISO 639-1 code is probably {better!r}: set languages.{key}.code: {better}"
            if better
            else f"set languages.{key}.code to the language's ISO 639-1 code (e.g. de, el, ja)"
        )
        return f"{code!r} is not an ISO 639-1 language code; {fix}"
    if tokenizer == "spacy" and code not in SPACY_CODES:
        return (
            f"spaCy has no tokenizer for {code!r}; set languages.{key}.trainer.tokenizer: sentencepiece "
            "(or code: xx, spaCy's multi-language tokenizer)"
        )
    return None
