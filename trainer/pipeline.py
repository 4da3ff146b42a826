"""The ULMFiT run: base LM -> LM fine-tuning -> classifier -> evaluation -> upload.

This module only sequences the stages. Every stage checkpoints (trainer.checkpoints); a
run started again with the same id (a recreated Spot VM, the local launcher's restart)
resumes from the newest complete checkpoint at the exact batch. Under torchrun every rank
runs this code on its shard of the data; only rank 0 writes to the bucket
(trainer.distributed).
"""
from __future__ import annotations

import hashlib
import pickle
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch
from fastai.text.all import (
    AWD_LSTM, F1Score, F1ScoreMulti, Perplexity, accuracy, accuracy_multi,
    awd_lstm_clas_config, awd_lstm_lm_config, language_model_learner, text_classifier_learner,
)

from trainer import distributed as D
from trainer import precision as P
from trainer.artifacts import evaluate, upload
from trainer.callbacks import (
    BatchProgressCallback, CheckpointCallback, EpochLogCallback, Interrupted, Preemption, StatusCallback,
)
from trainer.classification.recipe import classifier_epochs, classifier_phases, lm_finetune_phases
from trainer.checkpoints import Checkpoint, CheckpointStore, Position
from trainer.data import corpus_keys, load_labelled
from trainer.fitting import StagedFit, stage_name
from trainer.splits import make_splits
from trainer.errors import DataError, RunExistsError, TrainerExit
from trainer.runlog import QuietLog, RunLog
from trainer.runs import RunStatus, mark_failed, read_status, run_key
from trainer.storage import open_bucket
from trainer.lm import domain as domain_texts
from trainer.lm import pretrain as pretrain_job
from trainer.lm.base import finetune_vocab, read_vocab, sentencepiece_of
from trainer.lm.base import load_weights as load_base_weights
from trainer.lm.base import stage as base_lm_stage
from trainer.lm.store import BWD_WEIGHTS
from trainer.text.cache import SP_SAMPLE_CHARS, corpus_tokens, labelled_tokens, sentencepiece_tokenizer
from trainer.text.languages import default_tokenizer
from trainer.text.loaders import classifier_dataloaders, lm_dataloaders
from trainer.text.tokenizers import SPACY, TokenizerSpec, spacy_spec
from trainer.text.tokens import TokenIds, build_vocab, remap

INLINE_VALID_PCT = 0.1  # of an inline base LM's texts held out for its validation loss


class Run(StagedFit):
    def __init__(self, args, bucket, log, ctx: D.Context, preemption: Preemption):
        self.a, self.bucket, self.log, self.ctx, self.preemption = args, bucket, log, ctx, preemption
        # A scratch folder of our own is removed when the process ends (trainer.pipeline.run_training):
        # everything a resume needs is in the bucket, and local runs would otherwise fill /tmp.
        self.scratch = None if args.work_dir else Path(tempfile.mkdtemp(prefix=f"trainer-{args.lang}-"))
        self.work = Path(args.work_dir) if args.work_dir else self.scratch
        if ctx.distributed:
            self.work = self.work / f"rank{ctx.rank}"
        (self.work / "models").mkdir(parents=True, exist_ok=True)
        self.history: list[dict] = []
        self.arch = {"emb_sz": args.emb_sz, "n_hid": args.n_hid, "n_layers": args.n_layers}
        self.precision = P.resolve(args.precision)
        self.store = CheckpointStore(bucket, args.lang, args.run_id, self.work)
        self.resume: Checkpoint | None = None
        self.stage_vocab: list[str] | None = None
        self.base, self.base_chosen = None, False  # the base LM fine-tuned from (trainer.lm.base)
        # Finished stages' weights a later stage still needs ({stage: {"model", "vocab"}}), kept in
        # every later checkpoint: with trainer.bidirectional the forward models wait for the backward ones.
        self.carry: dict[str, dict] = {}
        self.bwd = None  # the backward classifier (learn, dls, tokens), trainer.bidirectional
        self.domain, self.domain_info = None, None  # unlabelled in-domain texts (trainer.lm.domain)
        self.epoch_log = EpochLogCallback(log, self.history)
        self.status_cb = StatusCallback(log)
        self.ckpt_cb = CheckpointCallback(ctx, preemption, self.save_checkpoint, minutes=args.checkpoint_minutes)
        self.progress_cb = BatchProgressCallback(log, every_s=args.progress_seconds, world=ctx.world)

    def put(self, src, name: str) -> None:
        if isinstance(src, (bytes, bytearray)):
            self.bucket.write_bytes(run_key(self.a.lang, self.a.run_id, name), bytes(src))
        else:
            self.bucket.upload(Path(src), run_key(self.a.lang, self.a.run_id, name))

    def stage(self, name: str, epochs: int = 0) -> None:
        self.log.line(f"== stage {name}" + (f" ({epochs} epochs)" if epochs else ""))
        self.log.update(stage=name, epoch=0, epochs=epochs, progress=None)

    # -- data ------------------------------------------------------------
    def prepare(self):
        a = self.a
        self.stage("preparing")
        self.data, raw = load_labelled(self.bucket, a.lang, text_col=a.text_col, label_col=a.label_col,
                                       label_sep=a.label_sep, task=a.task, label_cols=tuple(a.label_cols))
        for warning in self.data.warnings:
            self.log.line(f"warning: {warning}")
        # Splits first: a SentencePiece model never learns from a validation or test text.
        self.splits = make_splits(self.data, valid_pct=a.valid_pct, seed=a.seed)
        self.train_idx, self.valid_idx, self.test_idx = self.splits.train, self.splits.valid, self.splits.test
        self.resume = self.store.latest()  # before the tokenizer: a resumed run keeps its base LM's
        with D.rank0_first(self.ctx):  # rank 0 tokenizes and caches; the others read its cache
            self.tokenizer = self.choose_tokenizer()
            self.texts = labelled_tokens(self.bucket, a.lang, self.data.texts, log=self.log, tokenizer=self.tokenizer)
            keys = corpus_keys(self.bucket, a.lang)
            self.corpus = [corpus_tokens(self.bucket, a.lang, k, log=self.log, tokenizer=self.tokenizer)
                           for k in keys]
            self.domain, self.domain_info = domain_texts.load(self)  # after the splits: held-out texts dropped
        kind = "multi-label" if self.data.multi_label else "single-label"
        self.log.line(f"data: {len(self.data.texts)} labelled rows ({kind}), labels "
                      + ", ".join(f"{k}={v}" for k, v in sorted(self.data.label_counts.items()))
                      + f"; corpus: {sum(len(t) for t in self.corpus)} lines, "
                      f"{sum(t.n_tokens for t in self.corpus)} tokens in {len(keys)} file(s)")
        h = hashlib.sha256(raw + f"|{a.text_col}|{a.label_col}|{a.label_sep}|{a.task}|{a.label_cols}".encode())
        h.update(self.tokenizer.id.encode())
        for table in [*self.corpus, *([self.domain] if self.domain is not None else [])]:
            h.update(table.ids.tobytes())
            h.update("\n".join(table.vocab).encode())
        self.data_hash = h.hexdigest()[:16]
        self.log.line(f"split ({self.splits.source}): {len(self.train_idx)} train, {len(self.valid_idx)} valid, "
                      f"{len(self.test_idx)} test rows"
                      + (f"; {self.splits.duplicates_dropped} exact duplicate text(s) dropped"
                         if self.splits.duplicates_dropped else ""))
        for note in self.splits.notes:
            self.log.line(f"warning: {note}")
        self.adopt_resume()
        if self.ctx.distributed:
            self.log.line(f"data parallel: {self.ctx.world} processes ({D.Context.describe(self.ctx)}), "
                          f"bs {a.bs} per process = {a.bs * self.ctx.world} per step")

    def choose_tokenizer(self) -> TokenizerSpec:
        a = self.a
        code = a.lang_code or a.lang
        kind = default_tokenizer(code) if a.tokenizer == "auto" else a.tokenizer
        if kind == SPACY:
            spec = spacy_spec(code)
            self.log.line(f"tokenizer: {spec.describe()}")
            return spec
        inherited = sentencepiece_of(self, code)
        if inherited is not None:  # the base LM's pieces: its embeddings only transfer with its tokenizer
            self.log.line(f"tokenizer: {inherited.describe()}, the base LM's")
            return inherited
        # The training rows and the unlabelled in-domain texts: the pieces should be the domain's words.
        unlabelled = domain_texts.for_tokenizer(self, SP_SAMPLE_CHARS // 2)  # the corpus gets the rest
        if unlabelled:
            self.log.line(f"tokenizer: SentencePiece also learns from {len(unlabelled):,} unlabelled texts")
        return sentencepiece_tokenizer(self.bucket, a.lang, code,
                                       [*(self.data.texts[i] for i in self.train_idx), *unlabelled],
                                       vocab_size=a.sp_vocab_size, log=self.log)

    # -- stages ----------------------------------------------------------
    def base_lm(self):
        self.base, self.base_chosen = base_lm_stage(self), True

    def lm_learner(self, tokens: TokenIds, *, valid_pct: float = 0.1, max_train_tokens: int = 0):
        """An AWD-LSTM language model over `tokens` (ids into their vocab), seeded; not yet `setup`."""
        a = self.a
        P.seed_everything(a.seed + self.ctx.rank, deterministic=a.deterministic)
        dls = lm_dataloaders(tokens, bs=a.bs, seq_len=a.seq_len, seed=a.seed, valid_pct=valid_pct,
                             rank=self.ctx.rank, world=self.ctx.world, max_train_tokens=max_train_tokens)
        return language_model_learner(dls, AWD_LSTM, config={**awd_lstm_lm_config, **self.arch},
                                      drop_mult=a.drop_mult, pretrained=False, path=self.work,
                                      metrics=[accuracy, Perplexity()])

    def train_lm(self, stage: str, tokens: TokenIds, *, vocab: list[str], valid_pct: float = 0.1):
        """A base LM over `tokens` trained as `stage`, or the weights it finished with before an
        interruption; a forward one is carried in later checkpoints when a backward one follows."""
        a = self.a
        epochs, per_epoch = lm_budget(tokens.n_tokens * (1 - valid_pct), a.epochs_base_lm, a.max_lm_tokens)
        self.stage(stage, epochs)
        if epochs < a.epochs_base_lm or per_epoch:
            self.log.line(f"{stage}: {epochs} epoch(s) of {a.epochs_base_lm} over "
                          f"{'a seeded sample of ' + format(per_epoch, ',') if per_epoch else 'all'} of "
                          f"{int(tokens.n_tokens * (1 - valid_pct)):,} training tokens "
                          f"(trainer.max_lm_tokens {a.max_lm_tokens:,})")
        self.stage_vocab = vocab
        learn = self.lm_learner(tokens, valid_pct=valid_pct, max_train_tokens=per_epoch)
        if self.resumed_past(stage):
            D.unwrap(learn.model).load_state_dict(self.carry[stage]["model"])
            self.log.line(f"{stage}: finished before the interruption; using its weights")
            return learn
        learn = self.setup(learn)
        self.fit_phases(learn, stage, [(None, epochs, a.lr_lm)])
        if a.bidirectional and stage == "base_lm":
            self.keep(stage, learn, vocab)
        return learn

    def inline_texts(self) -> list[TokenIds]:
        """What an inline base LM reads: the corpus, the training rows and the unlabelled texts."""
        return [*self.corpus, self.texts.select(self.train_idx), *([self.domain] if self.domain is not None else [])]

    def inline_budget(self) -> tuple[int, int]:
        """(epochs, tokens per epoch) of an inline base LM under trainer.max_lm_tokens (see lm_budget)."""
        n = sum(t.n_tokens for t in self.inline_texts())
        return lm_budget(n * (1 - INLINE_VALID_PCT), self.a.epochs_base_lm, self.a.max_lm_tokens)

    def pretrain_base_lm(self, *, backwards: bool = False, vocab: list[str] | None = None) -> tuple[int, list[str]]:
        """Pretrains an LM on the corpus, the training rows and unlabelled texts into models/ -> (tokens, vocab).
        The backward one (`backwards`, same `vocab`) reads every text right to left."""
        a = self.a
        models, stage = self.work / "models", stage_name("base_lm", backwards)
        texts = self.inline_texts()  # the user's own unlabelled texts are the best LM text there is
        if vocab is None:
            vocab = build_vocab(texts, min_freq=a.min_freq, max_vocab=a.max_vocab)
            if self.resume_point(stage) is not None:
                vocab = self.resume.payload["vocab"]
            elif self.resumed_past(stage):
                vocab = self.carry[stage]["vocab"]
        tokens = TokenIds.concat([remap(t, vocab) for t in texts])
        learn = self.train_lm(stage, tokens.reversed() if backwards else tokens, vocab=vocab,
                              valid_pct=INLINE_VALID_PCT)
        torch.save(D.unwrap(learn.model).state_dict(), models / (BWD_WEIGHTS if backwards else "weights.pth"))
        (models / "vocab.pkl").write_bytes(pickle.dumps(list(vocab)))
        D.barrier(self.ctx)
        return tokens.n_tokens, vocab

    def lm_finetune(self, *, backwards: bool = False):
        """Fine-tunes the base LM (its backward one with `backwards`) on the training rows -> models/ft_enc*.pth."""
        a = self.a
        models, stage = self.work / "models", stage_name("lm_finetune", backwards)
        encoder_file = models / f"{stage_name('ft_enc', backwards)}.pth"
        if self.resumed_past(stage):
            self.ft_vocab = self.resume.payload["vocab"]
            self.log.line(f"{stage}: finished before the interruption; a later checkpoint has its results")
            return
        at = self.resume_point(stage)
        if at is not None and at.done:
            self.ft_vocab = self.resume.payload["vocab"]
            torch.save(self.resume.payload["encoder"], encoder_file)
            self.log.line(f"{stage}: finished before the interruption; reusing its encoder")
            return
        self.stage(stage, a.epochs_lm)
        # The LM learns the task's language from the training rows (and unlabelled in-domain texts)
        # only: validation and test texts stay unseen until they are scored.
        train_texts = self.texts.select(self.train_idx)
        if self.domain is not None:
            train_texts = TokenIds.concat([train_texts, self.domain])
        if at is not None:
            self.ft_vocab = self.resume.payload["vocab"]
        elif not backwards:  # the backward models share the forward ones' vocabulary
            base_vocab = read_vocab(models) if self.base is not None else None
            self.ft_vocab = finetune_vocab(build_vocab([train_texts], min_freq=a.min_freq, max_vocab=a.max_vocab),
                                           base_vocab, a.max_vocab)
            if base_vocab is not None:
                known = len(set(self.ft_vocab) & set(base_vocab) - {"xxfake"})
                self.log.line(f"vocabulary: {len(self.ft_vocab)} entries, {known} found an embedding in base LM "
                              f"{self.base.id} ({len(base_vocab)} entries)")
        self.stage_vocab = self.ft_vocab
        tokens = remap(train_texts, self.ft_vocab)
        learn = self.lm_learner(tokens.reversed() if backwards else tokens)
        if self.base is not None and (self.base.backward or not backwards):
            load_base_weights(learn, models, self.ft_vocab, weights=BWD_WEIGHTS if backwards else "weights.pth")
        elif self.base is not None:
            self.log.line(f"warning: base LM {self.base.id} has no backward LM: the backward LM starts from random "
                          f"weights (trainctl lm pretrain {a.lang} with trainer.bidirectional: true)")
        learn = self.setup(learn)
        self.fit_phases(learn, stage, lm_finetune_phases(a.lr_lm, a.epochs_lm), last_saves_done=False)
        encoder = D.unwrap(learn.model)[0].state_dict()
        torch.save(encoder, encoder_file)  # on every rank (fastai's save_encoder skips ranks > 0)
        self.save_checkpoint(None, Position(stage, done=True), [], encoder=encoder)

    def classifier(self, *, backwards: bool = False):
        """The classifier on the fine-tuned encoder; the backward one reads every text right to left."""
        a = self.a
        stage = stage_name("classifier", backwards)
        self.stage(stage, a.epochs_clf)
        self.stage_vocab = self.ft_vocab
        P.seed_everything(a.seed + self.ctx.rank, deterministic=a.deterministic)
        tokens = remap(self.texts, self.ft_vocab)
        tokens = tokens.reversed() if backwards else tokens
        dls = classifier_dataloaders(
            tokens, self.data.labels, multi_label=self.data.multi_label,
            label_names=self.data.label_names, splits=(self.train_idx, self.valid_idx), bs=a.bs, seq_len=a.seq_len,
            rank=self.ctx.rank, world=self.ctx.world)
        multi = self.data.multi_label
        metrics = ([accuracy_multi, F1ScoreMulti(average="macro")] if multi
                   else [accuracy, F1Score(average="macro")])
        learn = self.setup(text_classifier_learner(dls, AWD_LSTM, config={**awd_lstm_clas_config, **self.arch},
                                                   drop_mult=a.drop_mult, pretrained=False, seq_len=a.seq_len,
                                                   path=self.work, metrics=metrics))
        at = self.resume_point(stage)
        if self.resumed_past(stage):
            D.unwrap(learn.model).load_state_dict(self.carry[stage]["model"])
            self.log.line(f"{stage}: finished before the interruption; using its weights")
        elif at is not None and at.done:
            D.unwrap(learn.model).load_state_dict(self.resume.payload["model"])
            self.log.line(f"{stage}: finished before the interruption; evaluating its checkpoint")
        else:
            if at is None:
                learn.load_encoder(stage_name("ft_enc", backwards))
            epochs = classifier_epochs(a.epochs_clf, len(dls.train), a.min_clf_steps)
            if epochs != a.epochs_clf:
                self.log.line(f"{stage}: {epochs} epochs instead of {a.epochs_clf}: {len(dls.train)} batches "
                              f"per epoch, and at least {a.min_clf_steps} steps are taken (trainer.min_clf_steps)")
                self.stage(stage, epochs)
            # AWD-LSTM classifier layer groups: embedding, each LSTM layer, head.
            self.fit_phases(learn, stage, classifier_phases(a.lr, epochs, n_groups=self.arch["n_layers"] + 2))
        if a.bidirectional and not backwards:
            self.keep(stage, learn, self.ft_vocab)
        # Evaluation is rank 0's alone: no more collectives (get_preds fires before_fit too).
        learn.remove_cbs([self.epoch_log, self.status_cb, self.ckpt_cb, self.progress_cb, *learn.cbs.filter(
            lambda cb: isinstance(cb, D.DataParallelCallback))])
        if backwards:
            self.bwd = SimpleNamespace(learn=learn, dls=dls, tokens=tokens)
        else:
            self.learn, self.dls, self.clf_tokens = learn, dls, tokens


def lm_budget(train_tokens: float, epochs: int, max_tokens: int) -> tuple[int, int]:
    """(epochs, tokens per epoch or 0 for all) of a base-LM pretrain within `max_tokens` (0: no cap):
    fewer epochs first; one epoch over a corpus larger than the cap reads `max_tokens` of it."""
    if not max_tokens or epochs * train_tokens <= max_tokens:
        return epochs, 0
    if train_tokens <= max_tokens:
        return max(1, int(max_tokens // train_tokens)), 0
    return 1, int(max_tokens)


def _log_for(ctx: D.Context, bucket, args):
    """Rank 0 owns status.json and log.txt; the others only print."""
    if not ctx.main:
        return QuietLog(), False
    status = read_status(bucket, args.lang, args.run_id)
    resume = status is not None
    if status is None:
        status = RunStatus(run_id=args.run_id, lang=args.lang, env=args.env, job=args.job)
    else:
        status.resumed += 1
    log = RunLog(bucket, status)
    log.started()
    log.line(f"run {args.run_id} ({args.lang}, env {args.env})" + (f", resume #{status.resumed}" if resume else ""))
    return log, resume


def run_training(args) -> int:
    ctx = D.Context.from_env()
    bucket = open_bucket(args.bucket)
    status = read_status(bucket, args.lang, args.run_id)
    if status is not None and status.terminal:
        err = RunExistsError(f"run {args.run_id} already ended ({status.state}); its files are kept as they are",
                             hint="start a new run id")
        print(f"error: {err.message}\n  {err.hint}", flush=True)
        return TrainerExit.BAD_INPUT
    preemption = Preemption(ctx)
    preemption.install()
    started = time.time()
    log, run = QuietLog(), None
    try:
        D.init(ctx)
        log, _ = _log_for(ctx, bucket, args)
        run = Run(args, bucket, log, ctx, preemption)
        if args.job == pretrain_job.JOB:
            pretrain_job.execute(run, started)
        else:
            run.prepare()
            run.base_lm()
            run.lm_finetune()
            run.classifier()
            if args.bidirectional:
                run.lm_finetune(backwards=True)
                run.classifier(backwards=True)
        if ctx.main:
            if args.job != pretrain_job.JOB:
                upload(run, evaluate(run), started)
            log.succeeded()
            log.line(f"SUCCEEDED in {time.time() - started:.0f}s")
            log.flush()
        D.barrier(ctx)  # ranks leave together: one that exits early reads as a failure to torchrun
        return TrainerExit.SUCCEEDED
    except Interrupted:
        log.line("interrupted (SIGTERM): checkpoint saved; the same run id resumes from it")
        log.update(stage="interrupted", progress=None)
        return TrainerExit.INTERRUPTED
    except DataError as exc:
        log.failed(exc.message + (f" ({exc.hint})" if exc.hint else ""))
        return TrainerExit.BAD_INPUT
    except Exception as exc:  # the run must end with a status, whatever happened
        if D.is_peer_error(exc):
            log.line(f"a peer process stopped ({str(exc).splitlines()[0][:200]}); "
                     "resuming from the last complete checkpoint")
            log.update(stage="interrupted", progress=None)
            return TrainerExit.INTERRUPTED
        traceback.print_exc()
        if ctx.main:
            log.failed(f"{type(exc).__name__}: {exc}")
        else:  # rank 0 would only see a lost peer: record the real error
            mark_failed(bucket, args.lang, args.run_id, args.env, f"rank {ctx.rank}: {type(exc).__name__}: {exc}")
        return TrainerExit.FAILED
    finally:
        D.shutdown(ctx)
        if run is not None and run.scratch is not None:
            shutil.rmtree(run.scratch, ignore_errors=True)
