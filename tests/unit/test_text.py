"""trainer.text in process: token-id tables, the bucket cache, DataLoaders from ids (no model trained)."""

from __future__ import annotations

import gzip
import io
import json
import math
from collections import Counter

import numpy as np
import pytest

from tests.support.project import SAMPLE
from tests.support.text import fastai_tokens, parse, sample_ids, sample_rows
from trainer.data.labelled import corpus_keys
from trainer.storage import open_bucket
from trainer.text.cache import corpus_tokens, labelled_tokens
from trainer.text.tokens import TokenIds, build_vocab, remap, tokenize


class Lines:
    """Stands in for RunLog: keeps the lines."""

    def __init__(self):
        self.lines: list[str] = []

    def line(self, message: str) -> None:
        self.lines.append(message)

    def last(self) -> str:
        return self.lines[-1]


@pytest.fixture(scope="module")
def fr():
    return sample_rows("fr")


@pytest.fixture(scope="module")
def fr_corpus() -> list[str]:
    return [ln.strip() for ln in (SAMPLE / "fr" / "corpus" / "messages.txt").read_text().splitlines() if ln.strip()]


@pytest.fixture(params=["file", "gs"])
def bucket(request, tmp_path):
    if request.param == "gs":
        request.getfixturevalue("gcs_env")
        return open_bucket(f"gs://test-bucket/{tmp_path.name}")
    return open_bucket(f"file://{tmp_path / 'bucket'}")


# -- tokenize ---------------------------------------------------------------------------------------


def test_token_ids_bytes_select_concat():
    a = tokenize(["Bonjour le monde", "le colis", ""], "fr", workers=1)
    b = tokenize(["Autre monde !", "colis perdu"], "fr", workers=1)
    again = TokenIds.from_bytes(a.to_bytes())
    assert again == a and again.ids.dtype == np.int32 and again.offsets.dtype == np.int64
    assert a.to_bytes()[:2] == b"PK" and b"pickle" not in a.to_bytes()
    both = TokenIds.concat([a, b])
    assert len(both) == 5 and both.n_tokens == a.n_tokens + b.n_tokens
    words = lambda t: [[t.vocab[i] for i in t.text(n)] for n in range(len(t))]  # noqa: E731
    assert words(both) == words(a) + words(b)
    picked = both.select([4, 0, 4])
    assert words(picked) == [words(b)[1], words(a)[0], words(b)[1]]
    assert picked.counts()[both.vocab.index("colis")] == 2
    assert list(a.lengths()) == [len(t) for t in fastai_tokens(["Bonjour le monde", "le colis", ""])]


def test_vocab_and_remap_match_the_fastai_pipeline(fr, fr_corpus):
    from fastai.text.all import Numericalize, make_vocab

    texts = tokenize(fr.texts, "fr", workers=1)
    corpus = tokenize(fr_corpus, "fr", workers=1)
    old_texts, old_corpus = fastai_tokens(fr.texts), fastai_tokens(fr_corpus)
    train = list(range(0, len(fr.texts), 3))
    # textdata.build_vocab's code: make_vocab over a Counter of the tokens in stream order
    for tables, token_lists in [
        ([texts], old_texts),
        ([corpus, texts.select(train)], old_corpus + [old_texts[i] for i in train]),
    ]:
        for min_freq, max_vocab in [(1, 60000), (2, 60000), (3, 200)]:
            counter = Counter(t for toks in token_lists for t in toks)
            assert build_vocab(tables, min_freq=min_freq, max_vocab=max_vocab) == make_vocab(
                counter, min_freq=min_freq, max_vocab=max_vocab
            )
    vocab = build_vocab([texts], min_freq=3, max_vocab=60000)
    ids = remap(texts, vocab)
    num = Numericalize(vocab=vocab)
    assert ids.vocab == vocab and ids.ids.dtype == np.int32
    assert all(ids.text(i).tolist() == num(old_texts[i]).tolist() for i in range(len(old_texts)))
    assert (ids.ids == vocab.index("xxunk")).any()  # min_freq=3 leaves rare words out


def test_csv_field_longer_than_the_csv_default_limit():
    body = " ".join(["colis", "facture", "compte"] * 10_000)  # 200,000 characters > csv's 131,072
    data = parse(f'text,labels\n"{body}",a\ncourt,b\n'.encode())
    assert data.texts[0] == body
    table = tokenize(data.texts, "fr", workers=1)
    assert table.lengths()[0] == 30_001


# -- the bucket cache -------------------------------------------------------------------------------


def test_labelled_and_corpus_cache(bucket, fr, fr_corpus):
    corpus_a = "\n".join(fr_corpus[:150]) + "\n\n   \n" + "caf\xc3 mal encod\xe9".encode("latin-1").decode("latin-1")
    bucket.write_bytes("fr/data/corpus/a.txt", corpus_a.encode("utf-8", "surrogateescape")[:-4] + b"\xff\xfe\n")
    bucket.write_bytes("fr/data/corpus/b.txt.gz", gzip.compress("\n".join(fr_corpus[150:200]).encode()))
    bucket.write_bytes("fr/data/corpus/notes.md", b"not a corpus file")
    assert corpus_keys(bucket, "fr") == ["fr/data/corpus/a.txt", "fr/data/corpus/b.txt.gz"]
    log = Lines()
    texts = fr.texts[:60]

    first = labelled_tokens(bucket, "fr", texts, log=log, workers=1)
    assert log.last().startswith("tokens: cached 60 texts") and "1 workers" in log.last()
    assert labelled_tokens(bucket, "fr", texts, log=log) == first and "reused" in log.last()
    a = corpus_tokens(bucket, "fr", "fr/data/corpus/a.txt", log=log, workers=1)
    assert log.last().startswith("tokens: cached 151 texts")  # empty and blank lines skipped
    assert "\ufffd" in a.vocab[a.text(150)[-1]] or any("\ufffd" in a.vocab[i] for i in a.text(150))
    b = corpus_tokens(bucket, "fr", "fr/data/corpus/b.txt.gz", log=log, workers=1)
    assert b == tokenize(fr_corpus[150:200], "fr", workers=1)

    # a changed text is tokenized again; the corpus files are not
    edited = [texts[0] + " modifié", *texts[1:]]
    labelled_tokens(bucket, "fr", edited, log=log, workers=1)
    assert log.last().startswith("tokens: cached 60 texts")
    assert corpus_tokens(bucket, "fr", "fr/data/corpus/a.txt", log=log) == a and "reused" in log.last()
    assert corpus_tokens(bucket, "fr", "fr/data/corpus/b.txt.gz", log=log) == b and "reused" in log.last()
    caches = {k.split("/")[2] for k in bucket.list("fr/cache/")}
    assert len(caches) == 4  # two labelled versions, two corpus files


def test_corpus_shards_index_and_resume(bucket, fr_corpus):
    bucket.write_bytes("fr/data/corpus/big.txt", "\n".join(fr_corpus[:230]).encode())
    log = Lines()
    whole = corpus_tokens(bucket, "fr", "fr/data/corpus/big.txt", log=log, workers=2, shard_lines=50)
    assert whole == tokenize(fr_corpus[:230], "fr", workers=1)  # vocab too: first-appearance order
    keys = bucket.list("fr/cache/")
    prefix = keys[0].rsplit("/", 1)[0]
    assert sorted(k.rsplit("/", 1)[1] for k in keys) == ["index.json"] + [
        f"part-{i:05d}.{ext}" for i in range(5) for ext in ("json", "npz")
    ]
    # interrupted before the index and part 3: the next call tokenizes only part 3
    bucket.delete(f"{prefix}/index.json")
    bucket.delete(f"{prefix}/part-00003.json")
    assert corpus_tokens(bucket, "fr", "fr/data/corpus/big.txt", log=log, workers=1, shard_lines=50) == whole
    assert "reused 4 of 5 parts" in log.last()
    assert corpus_tokens(bucket, "fr", "fr/data/corpus/big.txt", log=log, shard_lines=50) == whole
    assert log.last().startswith("tokens: reused cache")


def test_corpus_parts_also_end_at_a_character_budget(tmp_path, monkeypatch, fr_corpus):
    from trainer.text import cache

    monkeypatch.setattr(cache, "SHARD_CHARS", 5_000)
    bucket = open_bucket(f"file://{tmp_path}")
    bucket.write_bytes("fr/data/corpus/long.txt", "\n".join(fr_corpus).encode())
    log = Lines()
    whole = corpus_tokens(bucket, "fr", "fr/data/corpus/long.txt", log=log, workers=1)
    index = next(k for k in bucket.list("fr/cache/") if k.endswith("index.json"))
    parts = json.loads(bucket.read_bytes(index))["parts"]
    assert len(parts) > 5 and sum(p["texts"] for p in parts) == len(fr_corpus)
    assert whole == tokenize(fr_corpus, "fr", workers=1)


def test_a_long_tokenization_says_where_it_is_in_the_log(tmp_path, monkeypatch, fr, fr_corpus):
    from trainer.text import progress

    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # a line after every chunk but the last
    bucket = open_bucket(f"file://{tmp_path}")
    log = Lines()
    texts = [f"{text} {n}" for n in range(50) for text in fr.texts[:60]]  # 3,000 texts: two chunks of 2,000
    table = labelled_tokens(bucket, "fr", texts, log=log, workers=1)
    said, last = log.lines[:-1], log.last()
    assert len(said) == 1 and said[0].startswith("tokens: tokenizing 2,000 of 3,000 texts (67%), "), said
    tokens = int(said[0].split(", ")[1].split()[0].replace(",", ""))
    assert 0 < tokens < table.n_tokens and "tokens/s, about " in said[0] and " left" in said[0]
    assert last.startswith("tokens: cached 3000 texts")

    bucket.write_bytes("fr/data/corpus/big.txt", "\n".join(fr_corpus).encode())
    log = Lines()
    corpus_tokens(bucket, "fr", "fr/data/corpus/big.txt", log=log, workers=1, shard_lines=50)
    said = log.lines[:-1]  # a shard is a chunk: the file's bytes read so far, and the texts
    assert said and all(line.startswith("tokens: tokenizing fr/data/corpus/big.txt: ") for line in said), said
    assert " MB read), 50 texts, " in said[0] and " MB read), 100 texts, " in said[1]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_is_drawn_and_wiped_before_each_log_line(monkeypatch):
    from trainer.text.progress import WIPE, TokenizingProgress

    monkeypatch.setenv("COLUMNS", "200")  # the bar is cut at the terminal's width
    now = [100.0]
    log, screen = Lines(), Terminal()
    with TokenizingProgress(
        log, "tokenizing", total=1000, every_s=10.0, clock=lambda: now[0], stream=screen
    ) as progress:
        now[0] += 1.0
        progress.advance(100, 2_000)
        assert not log.lines and screen.getvalue() == (
            WIPE + "tokens [##......................] 100 of 1,000 texts (10%), 2,000 tokens, 2,000 tokens/s, "
            "about 9s left"
        )
        now[0] += 10.0
        progress.advance(400, 8_000)
        assert log.lines == ["tokens: tokenizing 500 of 1,000 texts (50%), 10,000 tokens, 909 tokens/s, about 11s left"]
    assert screen.getvalue().endswith(WIPE)  # the caller's own line starts on a clean line
    plain = io.StringIO()  # not a terminal: lines only
    TokenizingProgress(Lines(), "tokenizing", total=10, stream=plain).advance(5, 50)
    assert plain.getvalue() == ""


def test_the_cached_parts_a_resumed_corpus_skips_count_in_no_rate():
    from trainer.text.progress import TokenizingProgress

    now = [0.0]
    log = Lines()
    progress = TokenizingProgress(
        log,
        "tokenizing big.txt:",
        total=4_000_000,
        unit="bytes",
        every_s=0.0,
        clock=lambda: now[0],
        stream=io.StringIO(),
    )
    now[0] += 1.0
    progress.skip(3000, 60_000, done=3_000_000)  # cached parts, read back in a second
    now[0] += 100.0
    progress.advance(500, 10_000, done=3_500_000)
    assert log.lines == [
        "tokens: tokenizing big.txt: 88% (3.5 MB of 4.0 MB read), 3,500 texts, 70,000 tokens, "
        "100 tokens/s, about 1m40s left"
    ]


# -- DataLoaders from ids ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fr_ids(fr):
    return sample_ids(fr)


def test_lm_dataloaders_shard_with_equal_batches(fr_ids):
    from trainer.text.loaders import lm_dataloaders, split_documents

    # documents of very different lengths, so that the two shards differ by several batches
    lengths = np.arange(1, 121) ** 2 // 10 + 1
    rng = np.random.default_rng(0)
    table = TokenIds(
        fr_ids.vocab,
        rng.integers(0, len(fr_ids.vocab), lengths.sum()).astype(np.int32),
        np.concatenate([[0], np.cumsum(lengths)]),
    )
    bs, seq_len = 4, 12
    train, _ = split_documents(len(table), 0.1, seed=3)
    uncapped = [math.ceil(((int(lengths[train[r::2]].sum()) - 1) // bs) / seq_len) for r in range(2)]
    assert uncapped[0] != uncapped[1]  # without the cap, DDP would hang at the end of an epoch

    dls = [lm_dataloaders(table, bs=bs, seq_len=seq_len, seed=3, rank=r, world=2) for r in range(2)]
    assert len(dls[0].train) == len(dls[1].train) == min(uncapped)
    assert [len(list(d.train)) for d in dls] == [min(uncapped)] * 2
    assert len(dls[0].train.new(shuffle=False)) == min(uncapped)
    docs = [set(d.train.dataset.items) for d in dls]
    assert docs[0] and docs[1] and not docs[0] & docs[1]
    assert list(dls[0].valid.dataset.items) == list(dls[1].valid.dataset.items)
    assert set(lm_dataloaders(table, bs=bs, seq_len=seq_len, seed=3).train.dataset.items) == docs[0] | docs[1]

    one = lm_dataloaders(fr_ids, bs=8, seq_len=12, seed=3)
    x, y = one.one_batch()
    assert x.shape == (8, 12) and (x[:, 1:] == y[:, :-1]).all()
    assert one.vocab == fr_ids.vocab


def test_a_token_cap_trains_on_a_seeded_sample_and_holds_out_the_same_documents(fr_ids):
    from trainer.text.loaders import lm_dataloaders, split_documents

    whole = lm_dataloaders(fr_ids, bs=8, seq_len=12, seed=3)
    capped = lm_dataloaders(fr_ids, bs=8, seq_len=12, seed=3, max_train_tokens=2000)
    train, valid = split_documents(len(fr_ids), 0.1, seed=3)
    kept = list(capped.train.dataset.items)
    assert kept == train[: len(kept)] and len(kept) < len(train)  # the first documents of the seeded order
    lengths = fr_ids.lengths()
    assert lengths[kept[:-1]].sum() < 2000 <= lengths[kept].sum()
    assert list(capped.valid.dataset.items) == list(whole.valid.dataset.items) == valid
    assert len(capped.train) < len(whole.train)


@pytest.mark.parametrize(
    "train_tokens, epochs, cap, expected",
    [
        (1_000, 8, 0, (8, 0)),  # no cap
        (1_000, 8, 10_000, (8, 0)),  # the cap does not bind
        (3_000, 8, 10_000, (3, 0)),  # fewer epochs over everything
        (11_000_000, 8, 12_000_000, (1, 0)),  # one epoch: the whole French corpus
        (15_000_000, 8, 12_000_000, (1, 12_000_000)),  # one epoch over a sample of a larger corpus
    ],
)
def test_a_token_cap_cuts_epochs_first(train_tokens, epochs, cap, expected):
    from trainer.lm.train import lm_budget

    assert lm_budget(train_tokens, epochs, cap) == expected


def test_classifier_dataloaders(fr, fr_ids):
    from fastai.text.all import TensorText

    from trainer.text.loaders import classifier_dataloaders

    train, valid = list(range(0, 300)), list(range(300, len(fr.texts)))
    kw = dict(multi_label=True, label_names=fr.label_names, splits=(train, valid), bs=16, seq_len=20)
    dls = [classifier_dataloaders(fr_ids, fr.labels, rank=r, world=2, **kw) for r in range(2)]
    assert len(dls[0].train) == len(dls[1].train) == 150 // 16
    assert list(dls[0].train.dataset.items) != list(dls[1].train.dataset.items)
    assert len(dls[0].valid.dataset) == len(valid)
    x, y = classifier_dataloaders(fr_ids, fr.labels, **kw).one_batch()
    assert isinstance(x, TensorText) and x.shape[0] == 16 and y.shape == (16, len(fr.label_names))
    single = [[labels[0]] for labels in fr.labels]
    one = classifier_dataloaders(fr_ids, single, **{**kw, "multi_label": False})
    x, y = one.one_batch()
    assert y.shape == (16,) and one.c == len(fr.label_names)
    assert one.vocab[0] == fr_ids.vocab and list(one.vocab[1]) == fr.label_names
