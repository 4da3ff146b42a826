"""The base-LM registry in the bucket: `<lang>/lm/<lm-id>/`, `<lang>/lm/CURRENT`, the legacy flat layout."""

from __future__ import annotations

import json

import pytest

from trainer.errors import DataError
from trainer.lm import store
from trainer.lm.store import LEGACY_ID, SMALL_LM_TOKENS, BaseLM
from trainer.storage import LocalBucket

ARCH = {"emb_sz": 16, "n_hid": 32, "n_layers": 2}


@pytest.fixture
def bucket(tmp_path):
    return LocalBucket(tmp_path / "bucket")


def make_lm(lm_id: str, created_at: str, tokens: int | None = 1000) -> BaseLM:
    return BaseLM(
        id=lm_id,
        source="pretrain",
        tokenizer="fastai-spacy-blank-fr-unicase-v1",
        arch=dict(ARCH),
        vocab_size=16,
        tokens=tokens,
        perplexity=42.0,
        created_at=created_at,
    )


def test_publish_read_list_and_current(bucket):
    first, second = make_lm("pre-aaa", "2026-01-01T00:00:00Z"), make_lm("pre-bbb", "2026-01-02T00:00:00Z")
    assert store.publish(bucket, "fr", first, b"w1", b"v1", make_current=True)
    assert store.publish(bucket, "fr", second, b"w2", b"v2", make_current=False)
    assert [lm.id for lm in store.list_lms(bucket, "fr")] == ["pre-aaa", "pre-bbb"]
    assert store.read(bucket, "fr", "pre-bbb") == second
    assert store.current_id(bucket, "fr") == "pre-aaa"
    assert bucket.read_bytes("fr/lm/pre-bbb/weights.pth") == b"w2"
    assert bucket.read_bytes("fr/lm/pre-bbb/vocab.pkl") == b"v2"
    store.set_current(bucket, "fr", "pre-bbb")
    assert store.current_id(bucket, "fr") == "pre-bbb"
    assert store.list_lms(bucket, "en") == [] and store.current_id(bucket, "en") is None


def test_use_unknown_id_names_the_published_ones(bucket):
    store.publish(bucket, "fr", make_lm("pre-aaa", "2026-01-01T00:00:00Z"), b"w", b"v", make_current=True)
    with pytest.raises(DataError, match=r"no base LM 'nope' for fr \(published: pre-aaa\)"):
        store.set_current(bucket, "fr", "nope")
    assert store.current_id(bucket, "fr") == "pre-aaa"


def test_complete_id_is_never_overwritten(bucket):
    lm = make_lm("pre-aaa", "2026-01-01T00:00:00Z")
    assert store.publish(bucket, "fr", lm, b"weights", b"vocab", make_current=False)
    meta = bucket.read_bytes("fr/lm/pre-aaa/meta.json")
    again = make_lm("pre-aaa", "2027-01-01T00:00:00Z")
    assert not store.publish(bucket, "fr", again, b"other", b"other", make_current=True)
    assert bucket.read_bytes("fr/lm/pre-aaa/weights.pth") == b"weights"
    assert bucket.read_bytes("fr/lm/pre-aaa/vocab.pkl") == b"vocab"
    assert bucket.read_bytes("fr/lm/pre-aaa/meta.json") == meta
    assert store.current_id(bucket, "fr") == "pre-aaa"  # make_current still moves CURRENT


def test_incomplete_id_is_not_listed_and_can_be_completed(bucket):
    # an interrupted publish: weights and vocab written, meta.json (the completion mark) not
    bucket.write_bytes("fr/lm/pre-aaa/weights.pth", b"half")
    bucket.write_bytes("fr/lm/pre-aaa/vocab.pkl", b"half")
    assert store.list_lms(bucket, "fr") == [] and store.read(bucket, "fr", "pre-aaa") is None
    with pytest.raises(DataError):
        store.set_current(bucket, "fr", "pre-aaa")
    assert store.publish(
        bucket, "fr", make_lm("pre-aaa", "2026-01-01T00:00:00Z"), b"whole", b"vocab", make_current=True
    )
    assert bucket.read_bytes("fr/lm/pre-aaa/weights.pth") == b"whole"
    assert [lm.id for lm in store.list_lms(bucket, "fr")] == ["pre-aaa"]
    assert store.current_id(bucket, "fr") == "pre-aaa"


def test_legacy_flat_layout_is_listed_and_current_without_current(bucket):
    bucket.write_bytes("fr/lm/weights.pth", b"w")
    bucket.write_bytes("fr/lm/vocab.pkl", b"v")
    bucket.write_bytes(
        "fr/lm/meta.json", json.dumps({"arch": ARCH, "vocab_size": 16, "trained_at": "2025-06-01T00:00:00Z"}).encode()
    )
    [legacy] = store.list_lms(bucket, "fr")
    assert legacy.id == LEGACY_ID and legacy.source == LEGACY_ID and legacy.arch == ARCH
    assert legacy.created_at == "2025-06-01T00:00:00Z"
    assert store.current_id(bucket, "fr") == LEGACY_ID
    newer = make_lm("pre-aaa", "2026-01-01T00:00:00Z")
    store.publish(bucket, "fr", newer, b"w2", b"v2", make_current=True)
    assert [lm.id for lm in store.list_lms(bucket, "fr")] == [LEGACY_ID, "pre-aaa"]
    assert store.current_id(bucket, "fr") == "pre-aaa"
    store.set_current(bucket, "fr", LEGACY_ID)  # going back to the old one is allowed
    assert store.current_id(bucket, "fr") == LEGACY_ID
    with pytest.raises(ValueError):
        store.publish(bucket, "fr", make_lm(LEGACY_ID, ""), b"w", b"v", make_current=False)


def test_small_lm_flag():
    assert make_lm("a", "", tokens=SMALL_LM_TOKENS - 1).small
    assert not make_lm("a", "", tokens=SMALL_LM_TOKENS).small
    assert not make_lm("a", "", tokens=None).small  # unknown size (imported): no warning
    # a pretrain capped by max_lm_tokens: small by what it read, whatever its corpus holds
    capped = make_lm("a", "", tokens=3_000_000)
    capped.corpus_tokens = 14_700_000
    assert capped.small and "3,000,000 tokens read of 14,700,000" in capped.describe()
