"""Base language models in the bucket: `<lang>/lm/<lm-id>/` and the `<lang>/lm/CURRENT` pointer.

A base LM is three objects — `weights.pth` (an AWD-LSTM language-model state dict),
`vocab.pkl` (its token list) and `meta.json` — written in that order; `meta.json` marks the
id complete, and a complete id is never written again. `CURRENT`
(a small JSON object naming an id) is written after. Ids are content-derived: the same
corpus, tokenizer and arch give the same id; another corpus gives another one.

The layout before ids (`<lang>/lm/weights.pth`, `vocab.pkl`, `meta.json` at the top)
is still read, as the id `legacy`.
"""

from __future__ import annotations

import calendar
import json
import time
from dataclasses import asdict, dataclass, field

from trainer.errors import DataError

FILES = ("weights.pth", "vocab.pkl", "meta.json")  # publication order: meta.json last
LEGACY_ID = "legacy"
SP_MODEL = "spm.model"  # beside the weights when the LM was trained on SentencePiece pieces
BWD_WEIGHTS = "weights_bwd.pth"  # the backward LM (same vocab, texts read right to left), when there is one
SMALL_LM_TOKENS = 10_000_000  # below this, transfer is weak (the ULMFiT paper used WikiText-103: 103 M)


@dataclass
class BaseLM:
    """meta.json of a published base LM."""

    id: str
    source: str  # pretrain | pretrain-inline | import | legacy
    tokenizer: str
    arch: dict
    vocab_size: int
    tokens: int | None = None  # distinct training tokens the LM read (None: unknown, e.g. imported)
    corpus_tokens: int | None = None  # training tokens of its corpus (more than `tokens` when max_lm_tokens capped it)
    corpus_hash: str | None = None
    perplexity: float | None = None  # on held-out corpus text
    run_id: str | None = None
    created_at: str = ""
    origin: dict = field(default_factory=dict)  # where imported files came from, coverage, ...
    backward: bool = False  # weights_bwd.pth is published too (trainer.bidirectional)
    backward_perplexity: float | None = None
    head: str = "full"  # the output layer it was trained with (trainer.lm_head); weights.pth is in the full layout

    @property
    def small(self) -> bool:
        return self.tokens is not None and self.tokens < SMALL_LM_TOKENS

    def arch_text(self) -> str:
        """`200/400/2 · 15,000 words`: embedding/hidden/layers of the AWD-LSTM, and its vocabulary."""
        a = self.arch or {}
        shape = "/".join(str(a[k]) for k in ("emb_sz", "n_hid", "n_layers") if k in a) or "?"
        return f"{shape} · {self.vocab_size:,} words"

    def age(self, now: float | None = None) -> str:
        """How long ago it was made (`3 d`, `5 h`, `12 min`), from created_at; '' when unknown."""
        try:
            made = calendar.timegm(time.strptime((self.created_at or "")[:19], "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            return ""
        s = max(0, (time.time() if now is None else now) - made)
        return f"{s / 86400:.0f} d" if s >= 86400 else f"{s / 3600:.0f} h" if s >= 3600 else f"{s / 60:.0f} min"

    def describe(self) -> str:
        size = f"{self.tokens:,} tokens" if self.tokens is not None else "tokens unknown"
        if self.corpus_tokens and self.tokens is not None and self.corpus_tokens > self.tokens:
            size += f" read of {self.corpus_tokens:,}"
        ppl = f", perplexity {self.perplexity:.1f}" if self.perplexity is not None else ""
        if self.head != "full":
            ppl += f" ({self.head} softmax)"
        bwd = ""
        if self.backward:
            bwd = ", with a backward LM" + (
                f" (perplexity {self.backward_perplexity:.1f})" if self.backward_perplexity is not None else ""
            )
        return f"{self.id} ({self.source}, {size}{ppl}, tokenizer {self.tokenizer}{bwd})"

    @classmethod
    def from_json(cls, data: dict, lm_id: str) -> BaseLM:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known.setdefault("id", lm_id)
        known.setdefault("source", LEGACY_ID if lm_id == LEGACY_ID else "pretrain-inline")
        known.setdefault("tokenizer", data.get("tokenizer") or "fastai-spacy-blank-v1")
        known.setdefault("arch", data.get("arch") or {})
        known.setdefault("vocab_size", int(data.get("vocab_size") or 0))
        known.setdefault("created_at", data.get("trained_at", ""))
        return cls(**known)


def prefix(lang: str, lm_id: str) -> str:
    return f"{lang}/lm/" if lm_id == LEGACY_ID else f"{lang}/lm/{lm_id}/"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read(bucket, lang: str, lm_id: str) -> BaseLM | None:
    """The published base LM `lm_id` (complete: meta.json present), or None."""
    key = prefix(lang, lm_id) + "meta.json"
    if not bucket.exists(key):
        return None
    try:
        data = json.loads(bucket.read_bytes(key))
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(
            f"{bucket.url(key)} is not valid JSON ({exc})",
            hint="publish the base LM again (trainctl lm pretrain / lm import)",
        ) from exc
    return BaseLM.from_json(data, lm_id)


def list_lms(bucket, lang: str, *, unreadable: list[tuple[str, str]] | None = None) -> list[BaseLM]:
    """Every complete base LM of `lang`, oldest first. With `unreadable`, a damaged meta.json is appended there
    as (id, why) and the others are still listed; without, it is an error."""
    ids = sorted(
        {
            k[len(f"{lang}/lm/") :].split("/", 1)[0]
            for k in bucket.list(f"{lang}/lm/")
            if k.endswith("/meta.json") and k.count("/") == 3
        }
    )
    found = []
    for lm_id in ids:
        try:
            lm = read(bucket, lang, lm_id)
        except DataError as exc:
            if unreadable is None:
                raise
            unreadable.append((lm_id, exc.message))
            continue
        if lm is not None:
            found.append(lm)
    legacy = read(bucket, lang, LEGACY_ID) if all(bucket.exists(f"{lang}/lm/{f}") for f in FILES) else None
    return sorted(([legacy] if legacy else []) + found, key=lambda lm: (lm.created_at, lm.id))


def current_id(bucket, lang: str) -> str | None:
    """The id CURRENT names; without a CURRENT, `legacy` when the old flat layout is there."""
    key = f"{lang}/lm/CURRENT"
    if bucket.exists(key):
        return json.loads(bucket.read_bytes(key))["id"]
    if all(bucket.exists(f"{lang}/lm/{f}") for f in FILES):
        return LEGACY_ID
    return None


def set_current(bucket, lang: str, lm_id: str) -> BaseLM:
    lm = read(bucket, lang, lm_id)
    if lm is None:
        ids = ", ".join(m.id for m in list_lms(bucket, lang)) or "none"
        raise DataError(
            f"no base LM {lm_id!r} for {lang} (published: {ids})", hint=f"list them: trainctl lm list {lang}"
        )
    bucket.write_bytes(f"{lang}/lm/CURRENT", json.dumps({"id": lm_id, "set_at": now()}).encode())
    return lm


def publish(
    bucket,
    lang: str,
    lm: BaseLM,
    weights: bytes,
    vocab: bytes,
    *,
    make_current: bool,
    tokenizer_model: bytes | None = None,
    weights_bwd: bytes | None = None,
) -> bool:
    """Write `lm` under its id (weights, vocab, the backward weights and the SentencePiece model it
    was trained with if any, then meta.json; never overwriting) and, if asked, point CURRENT at it.
    False when that id was already complete (nothing written)."""
    base = prefix(lang, lm.id)
    if lm.id == LEGACY_ID:
        raise ValueError("the legacy layout is read, never written")
    if (weights_bwd is not None) != lm.backward:
        raise ValueError(
            f"base LM {lm.id}: meta.json says backward={lm.backward}, weights_bwd given: {weights_bwd is not None}"
        )
    if bucket.exists(base + "meta.json"):
        if make_current:
            set_current(bucket, lang, lm.id)
        return False
    # without meta.json the id is incomplete (an interrupted publish): its files may be replaced
    bucket.write_bytes(base + "weights.pth", weights)
    bucket.write_bytes(base + "vocab.pkl", vocab)
    if weights_bwd is not None:
        bucket.write_bytes(base + BWD_WEIGHTS, weights_bwd)
    if tokenizer_model is not None:  # runs that fine-tune from this LM tokenize with the same model
        bucket.write_bytes(base + SP_MODEL, tokenizer_model)
    bucket.write_bytes(base + "meta.json", json.dumps(asdict(lm), indent=2).encode(), if_absent=True)
    if make_current:
        set_current(bucket, lang, lm.id)
    return True
