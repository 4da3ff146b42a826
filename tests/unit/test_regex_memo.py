"""Large regular expressions compiled once per machine (trainer/text/regex_memo.py): a pattern read back
from the cache is the pattern the compiler makes; a damaged or foreign file means an ordinary compile."""

from __future__ import annotations

import pickle
import re

import pytest

from tests.support.project import SAMPLE
from trainer.text import regex_memo

# A large case-insensitive alternation with named and numbered groups, as spaCy's French rules are built.
WORDS = [f"mot{i:05d}-{'é' * (i % 3)}x" for i in range(6000)]
PATTERN = r"(?iu)(?P<head>\w+)-(?:" + "|".join(re.escape(w) for w in WORDS) + r")|(\d+)"
SAMPLES = ["aa-MOT00001-éx", "z-mot05999-x", "q-mot00003-X", "q-mot00003-éx", "12345", "nope", "x-mot06000-x"]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "trainstack" / "regex"


def _same(a: re.Pattern, b: re.Pattern) -> None:
    assert (a.pattern, a.flags, a.groups, a.groupindex) == (b.pattern, b.flags, b.groups, b.groupindex)
    for text in SAMPLES:
        ma, mb = a.match(text), b.match(text)
        assert (ma and (ma.span(), ma.groups(), ma.groupdict())) == (mb and (mb.span(), mb.groups(), mb.groupdict()))


def test_a_large_pattern_is_compiled_once_then_read_back_equal(cache, monkeypatch):
    assert len(PATTERN) >= regex_memo.LARGE_PATTERN_CHARS
    reference = re.compile(PATTERN)
    first = regex_memo.compile_remembered(PATTERN)
    [kept] = cache.iterdir()
    _same(first, reference)

    def no_compiler(*_):
        raise AssertionError("compiled again")

    monkeypatch.setattr(regex_memo._compiler, "_code", no_compiler)
    _same(regex_memo.compile_remembered(PATTERN), reference)
    assert reference.match(SAMPLES[0]).group("head") == "aa"


@pytest.mark.parametrize(
    "damage",
    [lambda b: b[: len(b) // 2], lambda b: b[:-4] + b"\0\0\0\0", lambda b: b.replace(b"cpython", b"pypy", 1)],
    ids=["cut short", "bytes changed", "another interpreter"],
)
def test_a_damaged_or_foreign_file_means_an_ordinary_compile_and_is_rewritten(cache, damage):
    regex_memo.compile_remembered(PATTERN)
    [kept] = cache.iterdir()
    good = kept.read_bytes()
    kept.write_bytes(damage(good))
    _same(regex_memo.compile_remembered(PATTERN), re.compile(PATTERN))
    assert kept.read_bytes() == good


def test_small_patterns_and_other_flags_are_left_to_re(cache):
    assert regex_memo.compile_remembered("a+b") is re.compile("a+b")  # re's own cache answers
    assert not cache.exists()
    regex_memo.compile_remembered(PATTERN, re.MULTILINE)
    regex_memo.compile_remembered(PATTERN)
    assert len(list(cache.iterdir())) == 2  # the flags are part of the key


def test_compiling_goes_through_the_cache_only_inside_the_context_and_nesting_restores_it(cache):
    ordinary = re._compile
    with regex_memo.large_patterns_remembered():
        with regex_memo.large_patterns_remembered():
            assert re._compile is regex_memo.compile_remembered
        assert re._compile is regex_memo.compile_remembered
        re.compile(PATTERN)
    assert re._compile is ordinary and re.compile("a+b") is ordinary("a+b", 0)
    assert len(list(cache.iterdir())) == 1


def test_an_unpickled_pattern_is_read_from_the_cache(cache, monkeypatch):
    """A fastai learner exported with spaCy's French tokenizer pickles its compiled pattern: loading it
    compiles the pattern again unless the load is inside the context."""
    pickled = pickle.dumps(re.compile(PATTERN))
    with regex_memo.large_patterns_remembered():
        pickle.loads(pickled)  # compiled once, and kept
    reference = re.compile(PATTERN)
    re.purge()  # a new process: nothing compiled in memory
    monkeypatch.setattr(regex_memo._compiler, "_code", lambda *_: pytest.fail("compiled again"))
    with regex_memo.large_patterns_remembered():
        _same(pickle.loads(pickled), reference)


def test_an_unwritable_cache_still_compiles(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a file where a folder should be
    _same(regex_memo.compile_remembered(PATTERN), re.compile(PATTERN))


def test_spacys_french_rules_read_back_match_every_word_as_compiled():
    """The pattern this exists for (~3 s to compile): every word of the French sample, and its hyphenated
    and elided forms, matched alike by the pattern compiled (spaCy's import) and the one read back."""
    with regex_memo.large_patterns_remembered():
        from spacy.lang.fr.tokenizer_exceptions import TOKEN_MATCH

    compiled = TOKEN_MATCH.__self__
    kept = regex_memo.compile_remembered(compiled.pattern)
    assert kept is not compiled and (kept.pattern, kept.flags) == (compiled.pattern, compiled.flags)
    words = {w for path in (SAMPLE / "fr").rglob("*.csv") for w in path.read_text(encoding="utf-8").split()}
    words |= {"aujourd'hui", "Saint-Étienne", "peut-être", "rendez-vous", "c'est-à-dire", "porte-monnaie"}
    spans = {w: (m := compiled.match(w)) and m.span() for w in words}
    assert {w: (m := kept.match(w)) and m.span() for w in words} == spans
    assert sum(bool(span) for span in spans.values()) >= 3  # the rules do match some of them
