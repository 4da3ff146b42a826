"""The first stage of a training run: labelled rows, splits, tokenizer, token ids (cached), unlabelled texts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from trainer.data.labelled import corpus_keys, load_labelled
from trainer.data.splits import Splits, make_splits
from trainer.lm import domain as domain_texts
from trainer.runtime import distributed as D
from trainer.stages.base_lm import sentencepiece_of
from trainer.text.cache import SP_SAMPLE_CHARS, corpus_tokens, labelled_tokens, sentencepiece_tokenizer
from trainer.text.languages import default_tokenizer
from trainer.text.tokenizers import SPACY, TokenizerSpec, spacy_spec
from trainer.text.tokens import TokenIds


@dataclass(frozen=True)
class PreparedData:
    """What every later stage reads: the rows, how they are split, and their token ids."""

    data: object  # trainer.data.labelled.LabelledData
    splits: Splits
    tokenizer: TokenizerSpec
    texts: TokenIds  # every labelled row, in row order
    corpus: tuple[TokenIds, ...]  # <lang>/data/corpus/* files
    domain: TokenIds | None  # unlabelled in-domain texts (trainer.lm.domain), held-out texts dropped
    domain_info: domain_texts.DomainTexts | None
    data_hash: str  # rows, columns, tokenizer, corpus and unlabelled texts: a checkpoint of other data never resumes

    @property
    def train_idx(self) -> list[int]:
        return self.splits.train

    @property
    def valid_idx(self) -> list[int]:
        return self.splits.valid

    @property
    def test_idx(self) -> list[int]:
        return self.splits.test

    def inline_texts(self) -> list[TokenIds]:
        """What an inline base LM reads: the corpus, the training rows and the unlabelled texts."""
        return [*self.corpus, self.texts.select(self.train_idx), *([self.domain] if self.domain is not None else [])]


def prepare(rc, fit) -> PreparedData:
    """Reads and splits the rows, tokenizes (rank 0 first, into the bucket's cache) and takes over a checkpoint."""
    a, log = rc.a, rc.log
    rc.stage("preparing")
    data, raw = load_labelled(
        rc.bucket,
        a.lang,
        text_col=a.text_col,
        label_col=a.label_col,
        label_sep=a.label_sep,
        task=a.task,
        label_cols=tuple(a.label_cols),
    )
    for warning in data.warnings:
        log.line(f"warning: {warning}")
    # Splits first: a SentencePiece model never learns from a validation or test text.
    splits = make_splits(data, valid_pct=a.valid_pct, seed=a.seed)
    fit.find_resume()  # before the tokenizer: a resumed run keeps its base LM's
    with D.rank0_first(rc.ctx):  # rank 0 tokenizes and caches; the others read its cache
        tokenizer = choose_tokenizer(rc, fit, data, splits)
        texts = labelled_tokens(rc.bucket, a.lang, data.texts, log=log, tokenizer=tokenizer)
        keys = corpus_keys(rc.bucket, a.lang)
        corpus = tuple(corpus_tokens(rc.bucket, a.lang, k, log=log, tokenizer=tokenizer) for k in keys)
        domain, domain_info = domain_texts.load(rc, data, splits, tokenizer)  # held-out texts dropped
    kind = "multi-label" if data.multi_label else "single-label"
    log.line(
        f"data: {len(data.texts)} labelled rows ({kind}), labels "
        + ", ".join(f"{k}={v}" for k, v in sorted(data.label_counts.items()))
        + f"; corpus: {sum(len(t) for t in corpus)} lines, "
        f"{sum(t.n_tokens for t in corpus)} tokens in {len(keys)} file(s)"
    )
    h = hashlib.sha256(raw + f"|{a.text_col}|{a.label_col}|{a.label_sep}|{a.task}|{a.label_cols}".encode())
    h.update(tokenizer.id.encode())
    for table in [*corpus, *([domain] if domain is not None else [])]:
        h.update(table.ids.tobytes())
        h.update("\n".join(table.vocab).encode())
    prepared = PreparedData(
        data=data,
        splits=splits,
        tokenizer=tokenizer,
        texts=texts,
        corpus=corpus,
        domain=domain,
        domain_info=domain_info,
        data_hash=h.hexdigest()[:16],
    )
    log.line(
        f"split ({splits.source}): {len(splits.train)} train, {len(splits.valid)} valid, "
        f"{len(splits.test)} test rows"
        + (f"; {splits.duplicates_dropped} exact duplicate text(s) dropped" if splits.duplicates_dropped else "")
    )
    for note in splits.notes:
        log.line(f"warning: {note}")
    fit.adopt_resume(data_hash=prepared.data_hash, labels=data.label_names)
    if rc.ctx.distributed:
        log.line(
            f"data parallel: {rc.ctx.world} processes ({D.Context.describe(rc.ctx)}), "
            f"bs {a.bs} per process = {a.bs * rc.ctx.world} per step"
        )
    return prepared


def choose_tokenizer(rc, fit, data, splits: Splits) -> TokenizerSpec:
    a, log = rc.a, rc.log
    code = a.lang_code or a.lang
    kind = default_tokenizer(code) if a.tokenizer == "auto" else a.tokenizer
    if kind == SPACY:
        spec = spacy_spec(code)
        log.line(f"tokenizer: {spec.describe()}")
        return spec
    inherited = sentencepiece_of(rc, fit.resume, code)
    if inherited is not None:  # the base LM's pieces: its embeddings only transfer with its tokenizer
        log.line(f"tokenizer: {inherited.describe()}, the base LM's")
        return inherited
    # The training rows and the unlabelled in-domain texts: the pieces should be the domain's words.
    unlabelled = domain_texts.for_tokenizer(rc, data, splits, SP_SAMPLE_CHARS // 2)  # the corpus gets the rest
    if unlabelled:
        log.line(f"tokenizer: SentencePiece also learns from {len(unlabelled):,} unlabelled texts")
    return sentencepiece_tokenizer(
        rc.bucket,
        a.lang,
        code,
        [*(data.texts[i] for i in splits.train), *unlabelled],
        vocab_size=a.sp_vocab_size,
        log=log,
    )
