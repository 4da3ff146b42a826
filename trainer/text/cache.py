"""Token ids cached in the bucket, one entry per input: `<lang>/cache/<content-hash>/`.

- labelled texts: `tokens.npz`, keyed by the texts themselves (not the CSV bytes),
  so editing labels reuses the tokens and editing a text does not;
- each corpus file: `part-00000.npz` + `part-00000.json` per shard of
  `SHARD_LINES` lines or `SHARD_CHARS` characters, then `index.json`, written
  last (its presence = complete).
  A tokenization that was interrupted leaves finished parts, each with its
  .json; the next call streams past the lines of those parts and tokenizes
  only the rest, so a preempted VM does not start a large corpus over.

Changing train.csv never re-tokenizes an unchanged corpus file: their keys
are independent.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import json
import time
from typing import BinaryIO, Iterator

import fastai

from trainer.data.labelled import corpus_keys
from trainer.storage import Bucket, StorageError
from trainer.text.progress import TokenizingProgress
from trainer.text.tokenizers import TokenizerSpec, as_spec
from trainer.text.tokens import TokenIds, TokenizerPool

# A part ends at whichever comes first; 100M characters are ~20M tokens, ~80 MB of int32.
SHARD_LINES = 1_000_000
SHARD_CHARS = 100_000_000
_READ_BLOCK = 1 << 20


def _hasher(lang: str, kind: str, spec: TokenizerSpec) -> "hashlib._Hash":
    return hashlib.sha256(f"{kind}|{lang}|{spec.id}|fastai-{fastai.__version__}|".encode())


def labelled_key(lang: str, texts: list[str], tokenizer: TokenizerSpec | None = None) -> str:
    h = _hasher(lang, "labelled", tokenizer or as_spec(lang))
    for text in texts:
        raw = text.encode("utf-8", "surrogatepass")
        h.update(len(raw).to_bytes(8, "little"))  # length prefix: ["ab","c"] != ["a","bc"]
        h.update(raw)
    return f"{lang}/cache/{h.hexdigest()[:16]}/tokens.npz"


def _rate(tokens: int, seconds: float) -> str:
    return f"{tokens / max(seconds, 1e-9):,.0f} tokens/s"


def labelled_tokens(
    bucket: Bucket,
    lang: str,
    texts: list[str],
    *,
    log,
    workers: int | None = None,
    tokenizer: TokenizerSpec | None = None,
) -> TokenIds:
    """Token ids of the labelled texts, from the cache when the same texts were tokenized before
    (`tokenizer`: default spaCy for `lang`)."""
    tokenizer = tokenizer or as_spec(lang)
    key = labelled_key(lang, texts, tokenizer)
    damaged = False
    if bucket.exists(key):
        try:
            table = TokenIds.from_bytes(bucket.read_bytes(key))
        except (ValueError, KeyError, OSError) as exc:
            damaged = True  # e.g. a truncated upload: tokenize again and replace it
            log.line(f"tokens: cache {key} unreadable ({exc}); tokenizing again")
        else:
            log.line(f"tokens: reused cache {key}")
            return table
    started = time.perf_counter()
    with TokenizerPool(tokenizer, workers) as pool, TokenizingProgress(log, "tokenizing", total=len(texts)) as progress:
        table = pool.tokenize(texts, on_chunk=progress.advance)
        used = pool.used_workers
    seconds = time.perf_counter() - started
    done = f"{len(table)} texts, {table.n_tokens} tokens ({_rate(table.n_tokens, seconds)}, {used} workers)"
    try:
        bucket.write_bytes(key, table.to_bytes(), if_absent=not damaged)
    except StorageError as exc:  # a cache only saves the next run some time: this one goes on without it
        log.line(f"tokens: {done}; cache not written ({exc}), the next run tokenizes again")
        return table
    log.line(f"tokens: cached {done} to {key}")
    return table


def corpus_digest(fh: BinaryIO, lang: str, key: str, tokenizer: TokenizerSpec | None = None) -> str:
    """Content hash of a corpus object (its stored bytes, read as a stream) for this tokenizer."""
    h = _hasher(lang, "corpus-gz" if key.endswith(".gz") else "corpus", tokenizer or as_spec(lang))
    for block in iter(lambda: fh.read(_READ_BLOCK), b""):
        h.update(block)
    return h.hexdigest()[:16]


def corpus_lines(fh: BinaryIO, key: str) -> Iterator[str]:
    """Non-empty stripped lines, decompressed and decoded as a stream (bad UTF-8 replaced)."""
    raw = gzip.GzipFile(fileobj=fh, mode="rb") if key.endswith(".gz") else fh
    text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline=None)
    for line in text:
        line = line.strip()
        if line:
            yield line


def shard(lines: Iterator[str], max_lines: int, max_chars: int) -> Iterator[str]:
    """The next lines of `lines`, up to max_lines or until max_chars are reached (never reads one more)."""
    chars = 0
    for n, line in enumerate(lines, 1):
        yield line
        chars += len(line)
        if n >= max_lines or chars >= max_chars:
            return


def corpus_tokens(
    bucket: Bucket,
    lang: str,
    key: str,
    *,
    log,
    workers: int | None = None,
    shard_lines: int = SHARD_LINES,
    tokenizer: TokenizerSpec | None = None,
) -> TokenIds:
    """Token ids of one corpus file (one text per non-empty line), cached per file content and tokenizer."""
    tokenizer = tokenizer or as_spec(lang)
    with bucket.open_read(key) as fh:
        prefix = f"{lang}/cache/{corpus_digest(fh, lang, key, tokenizer)}/"
        size = fh.tell()  # the digest read it whole
        if bucket.exists(prefix + "index.json"):
            index = json.loads(bucket.read_bytes(prefix + "index.json"))
            table = TokenIds.concat([TokenIds.from_bytes(bucket.read_bytes(prefix + p["key"])) for p in index["parts"]])
            log.line(f"tokens: reused cache {prefix} ({key}: {len(table)} texts, {table.n_tokens} tokens)")
            return table
        fh.seek(0)
        cut = {"shard_lines": shard_lines, "shard_chars": SHARD_CHARS}
        parts, reused, seconds, position, new_tokens = [], 0, 0.0, 0, 0
        lines = corpus_lines(fh, key)
        # the lines are not counted before the end: progress is the file's bytes read (compressed ones for .gz)
        with (
            TokenizerPool(tokenizer, workers) as pool,
            TokenizingProgress(log, f"tokenizing {key}:", total=size, unit="bytes") as progress,
        ):

            def read() -> int:  # the line reader closes the file once it has read the last line
                return size if fh.closed else fh.tell()

            def tokenized(texts: int, tokens: int) -> None:
                progress.advance(texts, tokens, done=read())

            for i in itertools.count():
                part = _finished_part(bucket, f"{prefix}part-{i:05d}", {**cut, "start": position})
                if part is not None:  # left by an interrupted run: skip its lines
                    skipped = sum(1 for _ in itertools.islice(lines, len(part)))
                    if skipped != len(part):
                        raise RuntimeError(
                            f"cache part {prefix}part-{i:05d} has {len(part)} texts, {key} only "
                            f"{skipped} more; delete {bucket.url(prefix)} and run again"
                        )
                    reused += 1
                    progress.skip(len(part), part.n_tokens, done=read())
                else:
                    started = time.perf_counter()
                    part = pool.tokenize(shard(lines, shard_lines, SHARD_CHARS), on_chunk=tokenized)
                    seconds += time.perf_counter() - started
                    if not len(part):
                        break
                    new_tokens += part.n_tokens
                    _write_part(bucket, f"{prefix}part-{i:05d}", {**cut, "start": position}, part)
                parts.append(part)
                position += len(part)
            used = pool.used_workers
    index = {
        "source": key,
        "lang": lang,
        "tokenizer": tokenizer.id,
        "fastai": fastai.__version__,
        **cut,
        "texts": position,
        "tokens": sum(p.n_tokens for p in parts),
        "parts": [{"key": f"part-{i:05d}.npz", "texts": len(p), "tokens": p.n_tokens} for i, p in enumerate(parts)],
    }
    bucket.write_bytes(prefix + "index.json", json.dumps(index, indent=1).encode(), if_absent=True)
    table = TokenIds.concat(parts)
    note = f"; reused {reused} of {len(parts)} parts" if reused else ""
    log.line(
        f"tokens: cached {len(table)} texts, {table.n_tokens} tokens to {prefix} ({key}: "
        f"{_rate(new_tokens, seconds)}, {used} workers{note})"
    )
    return table


def _write_part(bucket: Bucket, name: str, meta: dict, part: TokenIds) -> None:
    # The same file, start and cut give the same content, so overwriting a stray .npz
    # left without its .json is safe; the .json goes second and marks the part finished.
    bucket.write_bytes(f"{name}.npz", part.to_bytes())
    bucket.write_bytes(f"{name}.json", json.dumps({**meta, "texts": len(part), "tokens": part.n_tokens}).encode())


def _finished_part(bucket: Bucket, name: str, expected: dict) -> TokenIds | None:
    """A part an interrupted run finished, if it was cut the same way from the same line."""
    if not bucket.exists(f"{name}.json"):
        return None
    meta = json.loads(bucket.read_bytes(f"{name}.json"))
    if any(meta.get(k) != v for k, v in expected.items()):
        return None
    try:
        part = TokenIds.from_bytes(bucket.read_bytes(f"{name}.npz"))
    except Exception:  # noqa: BLE001 - a damaged part is tokenized again
        return None
    return part if len(part) == meta.get("texts") else None


SP_SAMPLE_CHARS = 100_000_000  # corpus text a SentencePiece model is trained on, at most (~1 min)


def sentencepiece_tokenizer(
    bucket: Bucket, lang: str, code: str, texts: list[str], *, vocab_size: int, log
) -> TokenizerSpec:
    """A SentencePiece model trained on `texts` (training rows, unlabelled texts) and the corpus files in
    order, up to SP_SAMPLE_CHARS characters in all,
    cached in the bucket by its inputs: `<lang>/cache/<hash>/spm.model`, trained once per data."""
    import sentencepiece

    from trainer.text.tokenizers import RULES_ID, SENTENCEPIECE

    keys = corpus_keys(bucket, lang)
    h = hashlib.sha256(f"spm|{code}|{vocab_size}|{RULES_ID}|{sentencepiece.__version__}|{SP_SAMPLE_CHARS}|".encode())
    for text in texts:
        raw = text.encode("utf-8", "surrogatepass")
        h.update(len(raw).to_bytes(8, "little") + raw)
    for key in keys:
        with bucket.open_read(key) as fh:
            h.update(corpus_digest(fh, lang, key, as_spec(code)).encode())
    model_key = f"{lang}/cache/{h.hexdigest()[:16]}/spm.model"
    if bucket.exists(model_key):
        spec = TokenizerSpec(SENTENCEPIECE, code, bucket.read_bytes(model_key))
        log.line(f"tokenizer: reused {spec.describe()} from {model_key}")
        return spec

    def sample():
        yield from texts
        budget = SP_SAMPLE_CHARS - sum(map(len, texts))  # one budget for rows, unlabelled texts and corpus
        if budget <= 0:
            return
        for key in keys:
            with bucket.open_read(key) as fh:
                for line in corpus_lines(fh, key):
                    yield line
                    budget -= len(line)
                    if budget <= 0:
                        return

    from trainer.text.tokenizers import train_sentencepiece

    log.line(
        f"tokenizer: training a SentencePiece model ({vocab_size} pieces) on {len(texts):,} texts"
        + (f" and up to {SP_SAMPLE_CHARS:,} characters of {len(keys)} corpus file(s): a few minutes" if keys else "")
    )
    started = time.perf_counter()
    spec = TokenizerSpec(SENTENCEPIECE, code, train_sentencepiece(sample(), vocab_size=vocab_size, code=code))
    if not bucket.write_bytes(model_key, spec.sp_model, if_absent=True):  # another run was first: use its model
        spec = TokenizerSpec(SENTENCEPIECE, code, bucket.read_bytes(model_key))
    pieces = sentencepiece.SentencePieceProcessor(model_proto=spec.sp_model).get_piece_size()
    log.line(
        f"tokenizer: trained {spec.describe()}, {pieces} pieces (asked {vocab_size}), "
        f"in {time.perf_counter() - started:.1f} s -> {model_key}"
    )
    return spec
