"""Tokenization (cached in the bucket), vocabularies and fastai DataLoaders."""
from __future__ import annotations

import gzip
import hashlib
import json
import random

import pandas as pd
from fastai.text.all import (
    ColReader, Categorize, Datasets, LMDataLoader, MultiCategorize, Numericalize, OneHotEncode,
    Pad_Chunk, SortedDL, Tokenizer, WordTokenizer, make_vocab,
)
import fastai

from trainer.data import LabelledData
from trainer.storage import Bucket

TOKENIZER_ID = "fastai-spacy-blank-v1"


def tokenizer(lang: str) -> Tokenizer:
    """fastai's default rules on a blank spaCy pipeline: no model download needed."""
    return Tokenizer(WordTokenizer(lang))


def data_hash(lang: str, parts: list[bytes]) -> str:
    h = hashlib.sha256(f"{lang}|{TOKENIZER_ID}|fastai-{fastai.__version__}".encode())
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def tokenize_cached(bucket: Bucket, lang: str, key_hash: str, texts: list[str], corpus: list[str], log) -> tuple[list, list]:
    """Token lists for labelled texts and corpus; reuse <lang>/cache/<hash>/ when present."""
    key = f"{lang}/cache/{key_hash}/tokens.json.gz"
    if bucket.exists(key):
        cached = json.loads(gzip.decompress(bucket.read_bytes(key)))
        log.line(f"tokens: reused cache {key}")
        return cached["texts"], cached["corpus"]
    tok = tokenizer(lang)
    text_tokens = [list(tok(t)) for t in texts]
    corpus_tokens = [list(tok(t)) for t in corpus]
    payload = gzip.compress(json.dumps({"texts": text_tokens, "corpus": corpus_tokens}).encode(), mtime=0)
    if bucket.write_bytes(key, payload, if_absent=True):
        log.line(f"tokens: cached to {key}")
    return text_tokens, corpus_tokens


def build_vocab(token_lists: list[list[str]], *, min_freq: int, max_vocab: int) -> list[str]:
    from collections import Counter

    counter = Counter(t for toks in token_lists for t in toks)
    return make_vocab(counter, min_freq=min_freq, max_vocab=max_vocab)


def lm_dataloaders(token_lists, vocab, *, bs: int, seq_len: int, seed: int, valid_pct: float = 0.1):
    idx = list(range(len(token_lists)))
    random.Random(seed).shuffle(idx)
    n_valid = max(1, int(len(idx) * valid_pct))
    splits = [idx[n_valid:], idx[:n_valid]]
    dsets = Datasets(token_lists, [[Numericalize(vocab=vocab)]], splits=splits, dl_type=LMDataLoader)
    return dsets.dataloaders(bs=bs, seq_len=seq_len, num_workers=0)


def split_rows(n: int, valid_pct: float, seed: int) -> tuple[list[int], list[int]]:
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    n_valid = max(1, int(round(n * valid_pct)))
    return sorted(idx[n_valid:]), sorted(idx[:n_valid])


def classifier_dataloaders(data: LabelledData, lang: str, vocab, splits, *, bs: int, seq_len: int):
    labels = data.label_names
    if data.multi_label:
        df = pd.DataFrame({"text": data.texts, "labels": data.labels})
        y_tfms = [ColReader("labels"), MultiCategorize(vocab=labels), OneHotEncode(len(labels))]
    else:
        df = pd.DataFrame({"text": data.texts, "labels": [t[0] for t in data.labels]})
        y_tfms = [ColReader("labels"), Categorize(vocab=labels)]
    x_tfms = [ColReader("text"), tokenizer(lang), Numericalize(vocab=vocab)]
    dsets = Datasets(df, [x_tfms, y_tfms], splits=list(splits), dl_type=SortedDL)
    return dsets.dataloaders(bs=bs, before_batch=Pad_Chunk(seq_len=seq_len), num_workers=0)
