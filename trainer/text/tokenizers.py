"""Which tokenizer a run uses: spaCy words or a SentencePiece unigram model, with case rules for any script.

fastai's case rules (`replace_all_caps`, `replace_maj`) match `[A-Z]` only, so
"ΑΘΗΝΑ" or "Москва" lose their case marker. RULES replaces them with the same
regular-expression substitutions over every Unicode upper/lower-case letter,
built as `functools.partial(re.sub, ...)`: an exported model.pth pickles them
by reference to the standard library, so it still loads with plain fastai.

SentencePiece (as MultiFiT did for many languages) is trained on the run's
training texts and a sample of the corpus, stored content-addressed in the
bucket, and shipped inside the exported tokenizer.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

SPACY, SENTENCEPIECE = "spacy", "sentencepiece"
KINDS = (SPACY, SENTENCEPIECE)
RULES_ID = "unicase-v1"


def _char_class(test) -> str:
    """A regex character class body of every code point for which `test(char)` holds, as ranges."""
    ranges, start, prev = [], None, None
    for cp in range(sys.maxunicode + 1):
        if test(chr(cp)):
            if start is None:
                start = cp
            prev = cp
        elif start is not None:
            ranges.append((start, prev))
            start = None
    if start is not None:
        ranges.append((start, prev))
    esc = lambda cp: re.escape(chr(cp))  # noqa: E731
    return "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in ranges)


@functools.lru_cache(maxsize=1)
def case_rules() -> tuple:
    """(all-caps rule, capitalised rule), fastai's semantics for any cased script.

    fastai lowercases the marked word at once; here the final `lowercase` rule does it, so
    the capitalised rule must skip words with no lower-case letter (those got TK_UP)."""
    from fastai.text.core import TK_MAJ, TK_UP

    upper, lower = _char_class(str.isupper), _char_class(str.islower)
    # fastai: [A-Z]+[^a-z\s]* of length > 1 gets TK_UP; [A-Z][^A-Z\s]* of length > 1 gets TK_MAJ.
    all_caps = re.compile(rf"(^|\s)([{upper}][^{lower}\s]+)(?=\s|$)")
    capitalised = re.compile(rf"(^|\s)([{upper}][^{upper}\s]*[{lower}][^{upper}\s]*)(?=\s|$)")
    return (
        functools.partial(re.sub, all_caps, rf"\1{TK_UP} \2"),
        functools.partial(re.sub, capitalised, rf"\1{TK_MAJ} \2"),
    )


@functools.lru_cache(maxsize=1)
def rules() -> list:
    """fastai's default text rules with the Unicode case rules in place of the ASCII ones."""
    from fastai.text.core import defaults, replace_all_caps, replace_maj

    caps, maj = case_rules()
    swap = {replace_all_caps: caps, replace_maj: maj}
    return [swap.get(rule, rule) for rule in defaults.text_proc_rules]


@dataclass(frozen=True)
class TokenizerSpec:
    """spaCy's blank pipeline for `code`, or a trained SentencePiece model (`sp_model`: its bytes)."""

    kind: str
    code: str
    sp_model: bytes | None = None

    @property
    def id(self) -> str:
        """Part of every token cache key: another tokenizer or model never reuses the ids."""
        if self.kind == SPACY:
            return f"fastai-spacy-blank-{self.code}-{RULES_ID}"
        return f"sentencepiece-{hashlib.sha256(self.sp_model or b'').hexdigest()[:16]}-{RULES_ID}"

    def describe(self) -> str:
        if self.kind == SPACY:
            return f"spaCy ({self.code})"
        return f"SentencePiece unigram ({self.code}, model {self.id.split('-')[1]})"

    def fastai_tokenizer(self, cache_dir: Path):
        """The fastai word tokenizer for export (`Tokenizer(tok, rules=rules())`)."""
        from fastai.text.core import SentencePieceTokenizer, WordTokenizer

        if self.kind == SPACY:
            from trainer.text.regex_memo import large_patterns_remembered

            with large_patterns_remembered():
                return WordTokenizer(self.code)
        path = Path(cache_dir) / "spm.model"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.sp_model)
        return SentencePieceTokenizer(self.code, sp_model=path, cache_dir=cache_dir)


def spacy_spec(code: str) -> TokenizerSpec:
    return TokenizerSpec(SPACY, code)


def as_spec(tokenizer: "TokenizerSpec | str") -> TokenizerSpec:
    """A plain language code means spaCy's tokenizer for it."""
    return tokenizer if isinstance(tokenizer, TokenizerSpec) else spacy_spec(tokenizer)


def train_sentencepiece(texts: Iterable[str], *, vocab_size: int, code: str, max_chars: int = 200_000_000) -> bytes:
    """A unigram SentencePiece model (its bytes) over the rule-processed `texts`, fastai's settings.

    The special tokens (xxbos, xxmaj, ...) are user-defined pieces, so they are never split;
    `hard_vocab_limit=false` lets a small data set give a smaller vocabulary than asked. Every
    distinct character must fit in the vocabulary (SentencePiece refuses "vocabulary size is
    smaller than required_chars" otherwise: 50 rows of Japanese hold hundreds), so the size asked
    is raised to the characters seen plus the special pieces when they outnumber it."""
    import sentencepiece as spm
    from fastai.text.core import defaults, eu_langs

    apply = functools.reduce(lambda f, g: lambda t: g(f(t)), rules())
    specials = ["\u2581" + s for s in defaults.text_spec_tok]
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "texts.txt"
        chars, seen = 0, set()
        with raw.open("w", encoding="utf-8") as fh:
            for text in texts:
                line = apply(text).replace("\n", " ")
                fh.write(line + "\n")
                seen.update(line)
                chars += len(line)
                if chars >= max_chars:
                    break
        # + specials, <unk> and the word-boundary piece; a soft limit, so a larger size is harmless
        vocab_size = max(vocab_size, len(seen) + len(specials) + 2)
        spm.SentencePieceTrainer.Train(
            input=str(raw),
            model_prefix=str(Path(tmp) / "spm"),
            vocab_size=vocab_size,
            model_type="unigram",
            character_coverage=0.99999 if code in eu_langs else 0.9998,
            unk_id=len(specials),
            pad_id=-1,
            bos_id=-1,
            eos_id=-1,
            user_defined_symbols=",".join(specials),
            hard_vocab_limit=False,
            input_sentence_size=2_000_000,
            shuffle_input_sentence=True,
            minloglevel=2,
            num_threads=len(os.sched_getaffinity(0)),
        )
        return (Path(tmp) / "spm.model").read_bytes()
