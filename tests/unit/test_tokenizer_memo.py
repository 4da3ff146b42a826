"""`trainctl train` checks the tokenizer on a sample of the data before anything is applied; a check that
passed is remembered (stacks/runs/tokenizer_memo.py) and not paid again for the same sample and install."""

from __future__ import annotations

import pytest

import trainer.text.preflight
from stacks.project import Project
from stacks.runs.preflight import preflight_data
from tests.support.project import SAMPLE
from tests.support.trainctl import trainctl
from trainer.errors import DataError
from trainer.storage import open_bucket


@pytest.fixture
def checks(monkeypatch, tmp_path) -> list[str]:
    """The languages the real tokenizer check ran for, with the memo in a cache folder of the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ran, real = [], trainer.text.preflight.check_tokenizer

    def counted(key, texts, **kw):
        ran.append(kw.get("code") or key)
        return real(key, texts, **kw)

    monkeypatch.setattr(trainer.text.preflight, "check_tokenizer", counted)
    return ran


def test_a_passed_check_is_not_run_again_unless_the_sample_or_the_language_changes(project, checks):
    r = trainctl(project, "data", "push", "fr", str(SAMPLE / "fr"))
    assert r.returncode == 0, r.stdout + r.stderr
    config = Project(project).load("local")
    bucket, settings = open_bucket(config.bucket), config.language("fr")

    preflight_data(bucket, "fr", settings)
    preflight_data(bucket, "fr", settings)
    assert checks == ["fr"]

    bucket.write_bytes("fr/data/train.csv", b"text,labels\nune autre ligne,compte\net encore une,produit\n")
    preflight_data(bucket, "fr", settings)
    assert checks == ["fr", "fr"]

    # spaCy asked for a code it does not know: refused, and so never remembered
    spacy = settings.trainer.model_copy(update={"tokenizer": "spacy"})
    wrong = settings.model_copy(update={"code": "gr", "trainer": spacy})
    for _ in range(2):
        with pytest.raises(DataError, match="not a language code spaCy knows"):
            preflight_data(bucket, "fr", wrong)
    assert checks == ["fr", "fr", "gr", "gr"]
