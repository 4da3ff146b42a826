"""A fastai text classifier run on padded id tensors: the probabilities `learn.get_preds(test_dl(...))`
gives, without fastai's per-item pipeline, and mostly in larger batches with less padding.

fastai's SentenceEncoder reads a batch in chunks of `seq_len` tokens and, at each chunk, runs only the
first `real_bs` rows (those not padding at the chunk's first position), keeping the outputs of the last
`max_len` tokens. Once a batch is longer than one chunk, a row's result depends on its batch-mates: their
order, the padding they impose, which rows the prefix takes. Within one chunk it does not: every row
starts at position 0 with its xxbos, is read whole from a zero state, and its trailing padding is masked.

So the texts are batched as get_preds batches them (sorted by characters, longest first, `dls.bs` a batch),
and each such batch is longer than one chunk or not:
- not (nearly every row of ordinary texts): its rows join one pool, sorted by token count and run in
  batches of BATCH_ROWS, the fewest pads and the fewest calls, with the same result per row;
- longer: run exactly as get_preds runs it (same rows, same order, same padding), so a long text, and the
  texts batched with it, come out as they always did.

A model trained in bf16 autocast (trainer/runtime/precision.py) keeps its CpuAutocast callback, so
get_preds runs its forward passes in autocast: so does this, or the probabilities would differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BATCH_ROWS = 128  # fewer calls, little more padding once sorted: the fastest on this CPU (docs/BENCHMARKS.md)


@dataclass
class TextModel:
    """The parts of a fastai text classifier learner that classifying needs."""

    tokenizer: object  # fastai Tokenizer: `.rules` then `.tok` (spaCy or SentencePiece), batch at a time
    vocab_ids: dict  # Numericalize's token -> id (a defaultdict: unknown tokens are xxunk)
    spacy_ids: object  # spacy_ids.SpacyIds for a spaCy tokenizer (the same ids, faster), else None
    model: object
    activation: object  # the loss function's activation (sigmoid, softmax), as get_preds applies it
    batch_rows: int  # get_preds' batch (the learner's `dls.bs`)
    bf16: bool  # trained in bf16 autocast: its CpuAutocast callback runs get_preds' forward passes in it
    seq_len: int
    pad_id: int


def text_model(learn) -> TextModel | None:
    """`learn`'s parts when it is the plain text classifier this module reproduces, else None (its
    pipeline has other steps, e.g. a backward model's reversal: fastai's own path serves it)."""
    from fastai.text.core import Tokenizer
    from fastai.text.data import Numericalize, Pad_Chunk
    from fastai.text.models.core import SentenceEncoder
    from fastcore.basics import getcallable

    from trainer.runtime.precision import CpuAutocast

    try:
        steps = list(learn.dls.tfms[0].fs)
        padding = list(learn.dls.before_batch.fs)
        encoder = learn.model[0]
    except (AttributeError, IndexError, TypeError):
        return None
    kinds = [type(step).__name__ for step in steps]
    if (
        kinds != ["ColReader", "Tokenizer", "Numericalize"]
        or not isinstance(steps[1], Tokenizer)
        or not isinstance(steps[2], Numericalize)
        or len(padding) != 1
        or not isinstance(padding[0], Pad_Chunk)
        or not padding[0].pad_first
        or list(learn.dls.after_batch.fs)
        or not isinstance(encoder, SentenceEncoder)
        or encoder.bptt != padding[0].seq_len
        or encoder.pad_idx != padding[0].pad_idx
    ):
        return None
    return TextModel(
        tokenizer=steps[1],
        vocab_ids=steps[2].o2i,
        spacy_ids=_spacy_ids(steps[1], steps[2].o2i),
        model=learn.model,
        activation=getcallable(learn.loss_func, "activation"),
        batch_rows=learn.dls.bs,
        bf16=any(isinstance(callback, CpuAutocast) for callback in learn.cbs),
        seq_len=encoder.bptt,
        pad_id=encoder.pad_idx,
    )


def replica(parts: TextModel) -> TextModel:
    """`parts` with a model module of its own sharing the weights: the AWD-LSTM keeps its batch's hidden state on
    the module, so two batches classified at once need two modules, not two copies of the weights."""
    import copy
    import dataclasses

    model = parts.model
    shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return dataclasses.replace(parts, model=copy.deepcopy(model, memo=shared))


def _spacy_ids(tokenizer, vocab_ids: dict):
    from fastai.text.core import SpacyTokenizer

    from trainer.serving.spacy_ids import SpacyIds

    return SpacyIds(tokenizer.tok, vocab_ids) if isinstance(tokenizer.tok, SpacyTokenizer) else None


def token_ids(parts: TextModel, texts: list[str]) -> list[np.ndarray]:
    """Each text's ids, as fastai's Tokenizer and Numericalize make them (one call for all the texts)."""
    from fastai.text.core import compose

    rules = compose(*parts.tokenizer.rules)
    ruled = [rules(text) for text in texts]
    if parts.spacy_ids is not None:
        return parts.spacy_ids.ids(ruled)
    vocab_ids = parts.vocab_ids
    return [np.fromiter((vocab_ids[token] for token in row), dtype=np.int64) for row in parts.tokenizer.tok(ruled)]


def _padded(rows: list[np.ndarray], seq_len: int, pad_id: int):
    """fastai's pad_chunk layout: whole chunks of padding first, the rest after the text."""
    import torch

    longest = max(len(row) for row in rows)
    batch = torch.full((len(rows), longest), pad_id, dtype=torch.int64)
    for n, row in enumerate(rows):
        start = (longest - len(row)) // seq_len * seq_len
        batch[n, start : start + len(row)] = torch.from_numpy(row)
    return batch


def _run(parts: TextModel, rows: list[np.ndarray]) -> np.ndarray:
    import torch

    batch = _padded(rows, parts.seq_len, parts.pad_id)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=parts.bf16):
        logits = parts.model(batch)[0]
    # as get_preds: the activation on the float32 logits, outside autocast
    return parts.activation(logits.float()).numpy()


def probabilities(parts: TextModel, texts: list[str]) -> np.ndarray:
    """(texts, labels) probabilities, in the texts' order."""
    import torch

    ids = token_ids(parts, texts)
    # get_preds' order: by characters, longest first, ties in input order (a stable sort)
    by_chars = sorted(range(len(texts)), key=lambda n: len(texts[n]), reverse=True)
    whole_batches, pooled = [], []
    for start in range(0, len(by_chars), parts.batch_rows):
        batch = by_chars[start : start + parts.batch_rows]
        if max(len(ids[n]) for n in batch) > parts.seq_len:
            whole_batches.append(batch)
        else:
            pooled.extend(batch)
    pooled.sort(key=lambda n: len(ids[n]), reverse=True)
    groups = whole_batches + [pooled[s : s + BATCH_ROWS] for s in range(0, len(pooled), BATCH_ROWS)]
    out: np.ndarray | None = None
    parts.model.eval()
    with torch.inference_mode():
        for group in groups:
            probs = _run(parts, [ids[n] for n in group])
            if out is None:
                out = np.empty((len(texts), probs.shape[1]), dtype=probs.dtype)
            out[group] = probs
    return out
