"""`trainctl lm import`: publish existing fastai AWD-LSTM language-model weights as a base LM.

The files are checked first (trainer.lm.import_checks): a pair that does not fit publishes nothing. What is
published is the state dict normalised to this fastai's model and the vocabulary as a plain pickled list;
the origin records the sha256 of the files as given, and how much of the language's training text the
vocabulary knows.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from dataclasses import dataclass, field
from pathlib import Path

from trainer.errors import DataError
from trainer.lm import store
from trainer.lm.import_checks import (
    HINT,
    OTHER_SPECIALS,
    PAD_ENTRY,
    checked_backward,
    load_state_dict,
    load_vocab,
    normalise,
)
from trainer.lm.store import BaseLM
from trainer.text.tokenizers import TokenizerSpec


@dataclass
class Coverage:
    """How much of the language's training text the imported vocabulary knows."""

    train_tokens: int = 0
    known_tokens: int = 0
    distinct_tokens: int = 0
    known_distinct: int = 0
    skipped: str | None = None  # why coverage was not measured

    @property
    def token_share(self) -> float | None:
        return self.known_tokens / self.train_tokens if self.train_tokens else None

    @property
    def distinct_share(self) -> float | None:
        return self.known_distinct / self.distinct_tokens if self.distinct_tokens else None

    def as_dict(self) -> dict:
        return {
            "train_tokens": self.train_tokens,
            "known_tokens": self.known_tokens,
            "token_share": self.token_share,
            "distinct_tokens": self.distinct_tokens,
            "known_distinct": self.known_distinct,
            "distinct_share": self.distinct_share,
            "skipped": self.skipped,
        }

    def describe(self) -> str:
        if self.skipped:
            return f"coverage not measured: {self.skipped}"
        return (
            f"the vocabulary covers {self.token_share:.1%} of the {self.train_tokens:,} training tokens "
            f"({self.known_distinct:,} of {self.distinct_tokens:,} distinct: {self.distinct_share:.1%})"
        )


@dataclass
class ImportReport:
    coverage: Coverage
    published: bool  # False: this pair was already published under the same id (nothing rewritten)
    warnings: list[str] = field(default_factory=list)


def measure_coverage(
    bucket,
    lang: str,
    vocab: list[str],
    tokenizer: TokenizerSpec,
    *,
    text_col: str,
    label_col: str,
    label_sep: str,
    label_cols: tuple[str, ...],
    task: str,
) -> Coverage:
    """The share of the language's training tokens (and distinct tokens) found in `vocab`."""
    from trainer.data.labelled import data_file, load_labelled

    if data_file(bucket, lang, "train") is None:
        return Coverage(skipped=f"no {lang}/data/train.* in the bucket (trainctl data push {lang} ...)")
    import numpy as np

    from trainer.text.tokens import tokenize

    try:
        data, _ = load_labelled(
            bucket,
            lang,
            text_col=text_col,
            label_col=label_col,
            label_sep=label_sep,
            task=task,
            label_cols=tuple(label_cols),
        )
    except DataError as exc:  # the training data's problem, reported by `train`: the LM itself is fine
        return Coverage(skipped=f"the training data cannot be read ({exc.message})")
    table = tokenize(data.texts, tokenizer, workers=1)
    counts = table.counts()
    in_vocab = set(vocab) - {PAD_ENTRY}
    known = np.fromiter((tok in in_vocab for tok in table.vocab), dtype=bool, count=len(table.vocab))
    used = counts > 0
    return Coverage(
        train_tokens=int(counts.sum()),
        known_tokens=int(counts[known].sum()),
        distinct_tokens=int(used.sum()),
        known_distinct=int((used & known).sum()),
    )


def file_sha256(path: Path, *also) -> str:
    """The file's sha256, read in 4 MiB pieces (WT103's weights are hundreds of MB: never read whole twice),
    each piece fed to the hashes `also` too."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
            for other in also:
                other.update(chunk)
    return digest.hexdigest()


def import_id(weights: Path, vocab_raw: bytes, backward: Path | None) -> tuple[str, dict]:
    """The published id, `imp-` + sha256 of the weights' bytes then the vocabulary's (with a backward LM, its
    sha256 too), and the sha256s the origin records (weights_sha256, vocab_sha256[, backward_sha256])."""
    pair = hashlib.sha256()
    shas = {"weights_sha256": file_sha256(weights, pair)}
    pair.update(vocab_raw)
    shas["vocab_sha256"] = hashlib.sha256(vocab_raw).hexdigest()
    if backward is not None:  # with a backward LM: another id (forward-only ids stay as they were)
        shas["backward_sha256"] = file_sha256(backward)
        pair.update(b"backward:" + shas["backward_sha256"].encode())
    return f"imp-{pair.hexdigest()[:12]}", shas


def _torch_bytes(tensors: dict) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(tensors, buf)
    return buf.getvalue()


def _already_published(
    bucket, lang: str, existing: BaseLM, tokenizer: TokenizerSpec, warnings: list[str]
) -> tuple[BaseLM, ImportReport]:
    """The same files imported again: nothing rewritten, CURRENT pointed at them (refused with another tokenizer:
    a base LM has the one its vocabulary was made with)."""
    if existing.tokenizer != tokenizer.id:
        raise DataError(
            f"these files are already published as {existing.id} with tokenizer {existing.tokenizer} "
            f"(asked: {tokenizer.id})",
            hint="a base LM has one tokenizer, the one its vocabulary was made with: "
            f"trainctl lm use {lang} {existing.id} to use it as published",
        )
    store.set_current(bucket, lang, existing.id)
    return existing, ImportReport(
        Coverage(
            **{k: v for k, v in (existing.origin.get("coverage") or {}).items() if k in Coverage.__dataclass_fields__}
        ),
        False,
        warnings,
    )


def import_lm(
    bucket,
    lang: str,
    weights: Path,
    vocab: Path,
    *,
    tokenizer: TokenizerSpec,
    source_note: str = "",
    text_col: str = "text",
    label_col: str = "labels",
    label_sep: str = ";",
    label_cols: tuple[str, ...] = (),
    task: str = "auto",
    backward: Path | None = None,
    backward_vocab: Path | None = None,
) -> tuple[BaseLM, ImportReport]:
    """Check the pair (and the backward LM's weights, same vocabulary and arch), measure coverage,
    publish `<lang>/lm/imp-<hash>/` and point CURRENT at it."""
    weights, vocab = Path(weights), Path(vocab)
    for path in (weights, vocab, *([Path(backward)] if backward else [])):
        if not path.is_file():
            raise DataError(f"{path} does not exist or is not a file", hint=HINT)
    vocab_raw = vocab.read_bytes()
    tokens = load_vocab(vocab_raw, str(vocab))
    state, arch = normalise(load_state_dict(weights), len(tokens), str(weights))
    state_bwd = checked_backward(backward, backward_vocab, tokens, vocab, arch)
    lm_id, shas = import_id(weights, vocab_raw, Path(backward) if backward is not None else None)
    warnings = []
    absent = [tok for tok in OTHER_SPECIALS if tok not in tokens]
    if absent:
        warnings.append(
            f"the vocabulary lacks fastai's special tokens {', '.join(absent)}: texts using them map to xxunk"
        )
    existing = store.read(bucket, lang, lm_id)
    if existing is not None:
        return _already_published(bucket, lang, existing, tokenizer, warnings)
    coverage = measure_coverage(
        bucket,
        lang,
        tokens,
        tokenizer,
        text_col=text_col,
        label_col=label_col,
        label_sep=label_sep,
        label_cols=label_cols,
        task=task,
    )
    origin = {
        "weights": weights.name,
        "vocab": vocab.name,
        "weights_sha256": shas["weights_sha256"],
        "vocab_sha256": shas["vocab_sha256"],
        "coverage": coverage.as_dict(),
        "note": source_note,
    }
    if backward is not None:
        origin.update(backward=Path(backward).name, backward_sha256=shas["backward_sha256"])
    lm = BaseLM(
        id=lm_id,
        source="import",
        tokenizer=tokenizer.id,
        arch=arch,
        vocab_size=len(tokens),
        tokens=None,
        created_at=store.now(),
        origin=origin,
        backward=state_bwd is not None,
    )
    published = store.publish(
        bucket,
        lang,
        lm,
        _torch_bytes(state),
        pickle.dumps(list(tokens)),
        make_current=True,
        tokenizer_model=tokenizer.sp_model if tokenizer.kind == "sentencepiece" else None,
        weights_bwd=_torch_bytes(state_bwd) if state_bwd is not None else None,
    )
    return lm, ImportReport(coverage, published, warnings)
