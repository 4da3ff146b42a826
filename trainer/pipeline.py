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
import tempfile
import time
import traceback
from pathlib import Path

import torch
from fastai.text.all import (
    AWD_LSTM, F1Score, F1ScoreMulti, Perplexity, ProgressCallback, accuracy, accuracy_multi,
    awd_lstm_clas_config, awd_lstm_lm_config, language_model_learner, text_classifier_learner,
)

from trainer import distributed as D
from trainer import precision as P
from trainer.artifacts import evaluate, upload
from trainer.callbacks import (
    CheckpointCallback, EpochLogCallback, Interrupted, Preemption, ResumeCallback, StatusCallback,
)
from trainer.classification.recipe import classifier_epochs, classifier_phases, lm_finetune_phases
from trainer.checkpoints import Checkpoint, CheckpointStore, Position
from trainer.data import corpus_keys, load_labelled
from trainer.splits import make_splits
from trainer.errors import DataError, RunExistsError
from trainer.runlog import QuietLog, RunLog
from trainer.runs import RunStatus, mark_failed, read_status, run_key
from trainer.storage import open_bucket
from trainer.lm import pretrain as pretrain_job
from trainer.lm.base import finetune_vocab, read_vocab, sentencepiece_of
from trainer.lm.base import load_weights as load_base_weights
from trainer.lm.base import stage as base_lm_stage
from trainer.text.cache import corpus_tokens, labelled_tokens, sentencepiece_tokenizer
from trainer.text.languages import default_tokenizer
from trainer.text.loaders import classifier_dataloaders, lm_dataloaders
from trainer.text.tokenizers import SPACY, TokenizerSpec, spacy_spec
from trainer.text.tokens import TokenIds, build_vocab, remap

# Per-epoch figures are fastai's running metrics (threshold 0.5, per-label accuracy for
# multi-label): named apart from the final, tuned ones in metrics.json.
EPOCH_METRIC_NAMES = {"lm": {"accuracy": "token_accuracy"},
                      "multi": {"accuracy_multi": "label_accuracy@0.5", "f1_score": "macro_f1@0.5"},
                      "single": {"accuracy": "accuracy@argmax", "f1_score": "macro_f1@argmax"}}
EXIT_INTERRUPTED = 143  # the launchers (local supervisor, VM agent) resume the run after this


class Run:
    def __init__(self, args, bucket, log, ctx: D.Context, preemption: Preemption):
        self.a, self.bucket, self.log, self.ctx, self.preemption = args, bucket, log, ctx, preemption
        self.work = Path(args.work_dir or tempfile.mkdtemp(prefix=f"trainer-{args.lang}-"))
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
        self.epoch_log = EpochLogCallback(log, self.history)
        self.status_cb = StatusCallback(log)
        self.ckpt_cb = CheckpointCallback(ctx, preemption, self.save_checkpoint, minutes=args.checkpoint_minutes)

    def put(self, src, name: str) -> None:
        if isinstance(src, (bytes, bytearray)):
            self.bucket.write_bytes(run_key(self.a.lang, self.a.run_id, name), bytes(src))
        else:
            self.bucket.upload(Path(src), run_key(self.a.lang, self.a.run_id, name))

    def stage(self, name: str, epochs: int = 0) -> None:
        self.log.line(f"== stage {name}" + (f" ({epochs} epochs)" if epochs else ""))
        self.log.update(stage=name, epoch=0, epochs=epochs)

    # -- data ------------------------------------------------------------
    def prepare(self):
        a = self.a
        self.stage("preparing")
        self.data, raw = load_labelled(self.bucket, a.lang, text_col=a.text_col, label_col=a.label_col,
                                       label_sep=a.label_sep, task=a.task, label_cols=tuple(a.label_cols))
        for warning in self.data.warnings:
            self.log.line(f"warning: {warning}")
        # Splits first: a SentencePiece model learns from the training rows only.
        self.splits = make_splits(self.data, valid_pct=a.valid_pct, seed=a.seed)
        self.train_idx, self.valid_idx, self.test_idx = self.splits.train, self.splits.valid, self.splits.test
        self.resume = self.store.latest()  # before the tokenizer: a resumed run keeps its base LM's
        with D.rank0_first(self.ctx):  # rank 0 tokenizes and caches; the others read its cache
            self.tokenizer = self.choose_tokenizer()
            self.texts = labelled_tokens(self.bucket, a.lang, self.data.texts, log=self.log, tokenizer=self.tokenizer)
            keys = corpus_keys(self.bucket, a.lang)
            self.corpus = [corpus_tokens(self.bucket, a.lang, k, log=self.log, tokenizer=self.tokenizer)
                           for k in keys]
        kind = "multi-label" if self.data.multi_label else "single-label"
        self.log.line(f"data: {len(self.data.texts)} labelled rows ({kind}), labels "
                      + ", ".join(f"{k}={v}" for k, v in sorted(self.data.label_counts.items()))
                      + f"; corpus: {sum(len(t) for t in self.corpus)} lines, "
                      f"{sum(t.n_tokens for t in self.corpus)} tokens in {len(keys)} file(s)")
        h = hashlib.sha256(raw + f"|{a.text_col}|{a.label_col}|{a.label_sep}|{a.task}|{a.label_cols}".encode())
        h.update(self.tokenizer.id.encode())
        for table in self.corpus:
            h.update(table.ids.tobytes())
            h.update("\n".join(table.vocab).encode())
        self.data_hash = h.hexdigest()[:16]
        self.log.line(f"split ({self.splits.source}): {len(self.train_idx)} train, {len(self.valid_idx)} valid, "
                      f"{len(self.test_idx)} test rows"
                      + (f"; {self.splits.duplicates_dropped} exact duplicate text(s) dropped"
                         if self.splits.duplicates_dropped else ""))
        for note in self.splits.notes:
            self.log.line(f"warning: {note}")
        if self.resume is not None:
            self.resume.check_compatible(data_hash=self.data_hash, labels=self.data.label_names)
            self.history[:] = self.resume.payload.get("history", [])
            self.arch = self.resume.payload.get("arch", self.arch)
            self.log.line(f"resuming from checkpoint: {self.resume.position.describe()}")
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
        return sentencepiece_tokenizer(self.bucket, a.lang, code, [self.data.texts[i] for i in self.train_idx],
                                       vocab_size=a.sp_vocab_size, log=self.log)

    # -- checkpoints -----------------------------------------------------
    def save_checkpoint(self, learn, position: Position, rng_states: list[dict], **extra) -> None:
        """Called on every rank at the same point; rank 0 writes."""
        if not self.ctx.main:
            return
        payload = {"rng": rng_states, "history": list(self.history), "data_hash": self.data_hash,
                   "labels": self.data.label_names, "world": self.ctx.world, "arch": self.arch,
                   "vocab": self.stage_vocab, **extra}
        if self.base_chosen:  # a resumed run keeps its base LM even if CURRENT moved meanwhile
            payload["base_lm"] = self.base.id if self.base is not None else None
        if learn is not None:
            payload["model"] = D.unwrap(learn.model).state_dict()
            payload["opt"] = learn.opt.state_dict() if learn.opt is not None else None
        name = self.store.save(position, payload)
        if position.batch or position.done:
            self.log.line(f"checkpoint: {position.describe()} -> {name}")

    def resume_point(self, stage: str) -> Position | None:
        if self.resume is None or self.resume.position.stage != stage:
            return None
        return self.resume.position

    def setup(self, learn):
        """Every learner of the run: plain logs, this run's precision, data parallel across ranks."""
        learn.remove_cb(ProgressCallback)
        learn.logger = lambda *_: None  # Recorder would print raw lists; EpochLogCallback logs
        P.apply(learn, self.precision)
        if self.ctx.distributed:
            D.data_parallel(learn, self.ctx)
        return learn

    def fit_phases(self, learn, stage: str, phases: list[tuple], *, last_saves_done: bool = True) -> None:
        """phases: (freeze_to or None for all layers, epochs, lr). Resumes at the checkpoint's batch.

        The last epoch's checkpoint marks the stage done unless the stage saves its own (`last_saves_done`)."""
        learn.add_cbs([self.epoch_log, self.status_cb, self.ckpt_cb])
        at = self.resume_point(stage)
        if at is not None and (at.done or at.phase >= len(phases)):
            # Every phase ran before the interruption: the weights are the checkpoint's, not a fresh model's.
            D.unwrap(learn.model).load_state_dict(self.resume.payload["model"])
            self.log.line(f"{stage}: all epochs finished before the interruption; using the checkpoint's weights")
            return
        total, offset = sum(n for _, n, _ in phases), 0
        for i, (freeze_to, n, lr) in enumerate(phases):
            if at is not None and i < at.phase:
                offset += n
                continue
            learn.unfreeze() if freeze_to is None else learn.freeze_to(freeze_to)
            cbs = []
            if at is not None and i == at.phase:
                cbs = [self.restore(learn, at)]
            self.epoch_log.stage, self.epoch_log.phase, self.epoch_log.total = stage, f"{i + 1}/{len(phases)}", total
            self.epoch_log.names = EPOCH_METRIC_NAMES[
                "lm" if stage != "classifier" else "multi" if self.data.multi_label else "single"]
            self.epoch_log.offset = self.status_cb.offset = offset
            self.ckpt_cb.stage, self.ckpt_cb.phase_idx, self.ckpt_cb.last_phase = (
                stage, i, last_saves_done and i == len(phases) - 1)
            learn.fit_one_cycle(n, lr, start_epoch=at.epoch if cbs else 0, cbs=cbs)
            at = None
            if any(D.any_rank(self.ctx, self.preemption.requested)):
                raise Interrupted("SIGTERM")
            offset += n

    def restore(self, learn, at: Position) -> ResumeCallback:
        """Loads the checkpoint's weights (and optimizer, inside a phase) into `learn`."""
        p = self.resume.payload
        D.unwrap(learn.model).load_state_dict(p["model"])
        if (at.epoch or at.batch) and p.get("opt") is not None:
            learn.opt.load_state_dict(p["opt"])  # freeze_to() cleared it, as at a phase start
        same_world = p.get("world") == self.ctx.world
        rng = p["rng"][self.ctx.rank] if same_world else None
        if not same_world:
            self.log.line(f"note: checkpoint from {p.get('world')} process(es), now {self.ctx.world}: "
                          "data order after the resume differs from an uninterrupted run")
        self.log.line(f"{at.stage}: resumed at {at.describe()}")
        return ResumeCallback(at.epoch, at.batch, rng and rng["epoch"], rng and rng["now"])

    # -- stages ----------------------------------------------------------
    def base_lm(self):
        self.base, self.base_chosen = base_lm_stage(self), True

    def pretrain_base_lm(self) -> tuple[int, list[str]]:
        """Pretrains an LM on the corpus and the training rows into models/ -> (tokens, vocab)."""
        a = self.a
        models = self.work / "models"
        self.stage("base_lm", a.epochs_base_lm)
        train_texts = self.texts.select(self.train_idx)
        vocab = build_vocab([*self.corpus, train_texts], min_freq=a.min_freq, max_vocab=a.max_vocab)
        if self.resume_point("base_lm") is not None:
            vocab = self.resume.payload["vocab"]
        self.stage_vocab = vocab
        tokens = TokenIds.concat([remap(t, vocab) for t in [*self.corpus, train_texts]])
        P.seed_everything(a.seed + self.ctx.rank, deterministic=a.deterministic)
        dls = lm_dataloaders(tokens, bs=a.bs, seq_len=a.seq_len, seed=a.seed, rank=self.ctx.rank, world=self.ctx.world)
        learn = self.setup(language_model_learner(dls, AWD_LSTM, config={**awd_lstm_lm_config, **self.arch},
                                                  drop_mult=a.drop_mult, pretrained=False, path=self.work,
                                                  metrics=[accuracy, Perplexity()]))
        self.fit_phases(learn, "base_lm", [(None, a.epochs_base_lm, a.lr_lm)])
        torch.save(D.unwrap(learn.model).state_dict(), models / "weights.pth")
        (models / "vocab.pkl").write_bytes(pickle.dumps(list(vocab)))
        D.barrier(self.ctx)
        return tokens.n_tokens, vocab

    def lm_finetune(self):
        a = self.a
        models = self.work / "models"
        if self.resume is not None and self.resume.position.stage == "classifier":
            self.ft_vocab = self.resume.payload["vocab"]
            self.log.line("lm_finetune: finished before the interruption; the classifier checkpoint has its weights")
            return
        at = self.resume_point("lm_finetune")
        if at is not None and at.done:
            self.ft_vocab = self.resume.payload["vocab"]
            torch.save(self.resume.payload["encoder"], models / "ft_enc.pth")
            self.log.line("lm_finetune: finished before the interruption; reusing its encoder")
            return
        self.stage("lm_finetune", a.epochs_lm)
        # The LM learns the task's language from the training rows only: validation and test
        # texts stay unseen until they are scored.
        train_texts = self.texts.select(self.train_idx)
        if at is not None:
            self.ft_vocab = self.resume.payload["vocab"]
        else:
            base_vocab = read_vocab(models) if self.base is not None else None
            self.ft_vocab = finetune_vocab(build_vocab([train_texts], min_freq=a.min_freq, max_vocab=a.max_vocab),
                                           base_vocab, a.max_vocab)
            if base_vocab is not None:
                known = len(set(self.ft_vocab) & set(base_vocab) - {"xxfake"})
                self.log.line(f"vocabulary: {len(self.ft_vocab)} entries, {known} found an embedding in base LM "
                              f"{self.base.id} ({len(base_vocab)} entries)")
        self.stage_vocab = self.ft_vocab
        P.seed_everything(a.seed + self.ctx.rank, deterministic=a.deterministic)
        dls = lm_dataloaders(remap(train_texts, self.ft_vocab), bs=a.bs, seq_len=a.seq_len, seed=a.seed,
                             rank=self.ctx.rank, world=self.ctx.world)
        learn = language_model_learner(dls, AWD_LSTM, config={**awd_lstm_lm_config, **self.arch},
                                       drop_mult=a.drop_mult, path=self.work, pretrained=False,
                                       metrics=[accuracy, Perplexity()])
        if self.base is not None:
            load_base_weights(learn, models, self.ft_vocab)
        learn = self.setup(learn)
        self.fit_phases(learn, "lm_finetune", lm_finetune_phases(a.lr_lm, a.epochs_lm), last_saves_done=False)
        encoder = D.unwrap(learn.model)[0].state_dict()
        torch.save(encoder, models / "ft_enc.pth")  # on every rank (fastai's save_encoder skips ranks > 0)
        self.save_checkpoint(None, Position("lm_finetune", done=True), [], encoder=encoder)

    def classifier(self):
        a = self.a
        self.stage("classifier", a.epochs_clf)
        self.stage_vocab = self.ft_vocab
        P.seed_everything(a.seed + self.ctx.rank, deterministic=a.deterministic)
        self.clf_tokens = remap(self.texts, self.ft_vocab)
        self.dls = classifier_dataloaders(
            self.clf_tokens, self.data.labels, multi_label=self.data.multi_label,
            label_names=self.data.label_names, splits=(self.train_idx, self.valid_idx), bs=a.bs, seq_len=a.seq_len,
            rank=self.ctx.rank, world=self.ctx.world)
        multi = self.data.multi_label
        metrics = ([accuracy_multi, F1ScoreMulti(average="macro")] if multi
                   else [accuracy, F1Score(average="macro")])
        learn = self.setup(text_classifier_learner(self.dls, AWD_LSTM, config={**awd_lstm_clas_config, **self.arch},
                                                   drop_mult=a.drop_mult, pretrained=False, seq_len=a.seq_len,
                                                   path=self.work, metrics=metrics))
        if self.resume_point("classifier") is None:
            learn.load_encoder("ft_enc")
        epochs = classifier_epochs(a.epochs_clf, len(self.dls.train), a.min_clf_steps)
        if epochs != a.epochs_clf:
            self.log.line(f"classifier: {epochs} epochs instead of {a.epochs_clf}: {len(self.dls.train)} batches "
                          f"per epoch, and at least {a.min_clf_steps} steps are taken (trainer.min_clf_steps)")
            self.stage("classifier", epochs)
        # AWD-LSTM classifier layer groups: embedding, each LSTM layer, head.
        trimmed = classifier_phases(a.lr, epochs, n_groups=self.arch["n_layers"] + 2)
        at = self.resume_point("classifier")
        if at is not None and at.done:
            D.unwrap(learn.model).load_state_dict(self.resume.payload["model"])
            self.log.line("classifier: finished before the interruption; evaluating its checkpoint")
        else:
            self.fit_phases(learn, "classifier", trimmed)
        # Evaluation is rank 0's alone: no more collectives (get_preds fires before_fit too).
        learn.remove_cbs([self.epoch_log, self.status_cb, self.ckpt_cb, *learn.cbs.filter(
            lambda cb: isinstance(cb, D.DataParallelCallback))])
        self.learn = learn


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
        return 2
    preemption = Preemption(ctx)
    preemption.install()
    started = time.time()
    log = QuietLog()
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
        if ctx.main:
            if args.job != pretrain_job.JOB:
                upload(run, evaluate(run), started)
            log.succeeded()
            log.line(f"SUCCEEDED in {time.time() - started:.0f}s")
            log.flush()
        D.barrier(ctx)  # ranks leave together: one that exits early reads as a failure to torchrun
        return 0
    except Interrupted:
        log.line("interrupted (SIGTERM): checkpoint saved; the same run id resumes from it")
        log.update(stage="interrupted")
        return EXIT_INTERRUPTED
    except DataError as exc:
        log.failed(exc.message + (f" ({exc.hint})" if exc.hint else ""))
        return 2
    except Exception as exc:  # the run must end with a status, whatever happened
        if D.is_peer_error(exc):
            log.line(f"a peer process stopped ({str(exc).splitlines()[0][:200]}); "
                     "resuming from the last complete checkpoint")
            log.update(stage="interrupted")
            return EXIT_INTERRUPTED
        traceback.print_exc()
        if ctx.main:
            log.failed(f"{type(exc).__name__}: {exc}")
        else:  # rank 0 would only see a lost peer: record the real error
            mark_failed(bucket, args.lang, args.run_id, args.env, f"rank {ctx.rank}: {type(exc).__name__}: {exc}")
        return 1
    finally:
        D.shutdown(ctx)
