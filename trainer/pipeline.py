"""The ULMFiT run: base LM -> LM fine-tuning -> classifier -> evaluation -> upload.

Every stage checkpoints each epoch to `<run>/checkpoints/`; a run started again
with the same id (a recreated Spot VM) skips finished stages and continues the
interrupted phase from its last checkpoint.
"""
from __future__ import annotations

import csv
import io
import json
import pickle
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import fastai
from fastai.text.all import (
    AWD_LSTM, F1Score, F1ScoreMulti, Perplexity, ProgressCallback, accuracy, accuracy_multi,
    awd_lstm_clas_config, awd_lstm_lm_config, language_model_learner, set_seed, text_classifier_learner,
)

from trainer import metrics as M
from trainer.callbacks import CheckpointCallback, EpochLogCallback, PreemptionCallback, StatusCallback
from trainer.data import CORPUS_PREFIX, DATA_KEY, parse_labelled_csv
from trainer.errors import DataError, RunExistsError
from trainer.runlog import RunLog
from trainer.runs import RUNNING, RunStatus, read_status, run_key
from trainer.storage import open_bucket
from trainer import textdata as T

LM_KEYS = ("lm/weights.pth", "lm/vocab.pkl", "lm/meta.json")


class Interrupted(Exception):
    """SIGTERM arrived; the current state is checkpointed."""


class Run:
    def __init__(self, args, bucket, log: RunLog, resume: bool):
        self.a, self.bucket, self.log, self.resume = args, bucket, log, resume
        self.work = Path(args.work_dir or tempfile.mkdtemp(prefix=f"trainer-{args.lang}-"))
        (self.work / "models").mkdir(parents=True, exist_ok=True)
        self.history: list[dict] = []
        self.preempt = PreemptionCallback()
        self.epoch_log = EpochLogCallback(log, self.history)
        self.status_cb = StatusCallback(log)
        self.ckpt = CheckpointCallback(self.put, self.work)
        self.arch = {"emb_sz": args.emb_sz, "n_hid": args.n_hid, "n_layers": args.n_layers}

    # -- bucket helpers -------------------------------------------------
    def key(self, name: str) -> str:
        return run_key(self.a.lang, self.a.run_id, name)

    def put(self, src, name: str) -> None:
        if isinstance(src, (bytes, bytearray)):
            self.bucket.write_bytes(self.key(name), bytes(src))
        else:
            self.bucket.upload(Path(src), self.key(name))

    def checkpoint_meta(self, stage: str) -> dict | None:
        if not self.resume or not self.bucket.exists(self.key(f"checkpoints/{stage}.ckpt.json")):
            return None
        return json.loads(self.bucket.read_bytes(self.key(f"checkpoints/{stage}.ckpt.json")))

    # -- stages ---------------------------------------------------------
    def stage(self, name: str, epochs: int = 0) -> None:
        self.log.line(f"== stage {name}" + (f" ({epochs} epochs)" if epochs else ""))
        self.log.update(stage=name, epoch=0, epochs=epochs)

    def prepare(self):
        a = self.a
        self.stage("preparing")
        key = DATA_KEY.format(lang=a.lang)
        if not self.bucket.exists(key):
            raise DataError(f"no labelled data at {self.bucket.url(key)}",
                            hint=f"stage it with `trainctl data push {a.lang} PATH`")
        raw = self.bucket.read_bytes(key)
        self.data = parse_labelled_csv(raw, text_col=a.text_col, label_col=a.label_col,
                                       label_sep=a.label_sep, source=self.bucket.url(key))
        for warning in self.data.warnings:
            self.log.line(f"warning: {warning}")
        corpus_keys = [k for k in self.bucket.list(CORPUS_PREFIX.format(lang=a.lang)) if k.endswith(".txt")]
        corpus_raw = [self.bucket.read_bytes(k) for k in corpus_keys]
        corpus = [ln.strip() for blob in corpus_raw for ln in blob.decode("utf-8", "replace").splitlines() if ln.strip()]
        kind = "multi-label" if self.data.multi_label else "single-label"
        self.log.line(f"data: {len(self.data.texts)} labelled rows ({kind}), labels "
                      + ", ".join(f"{k}={v}" for k, v in sorted(self.data.label_counts.items()))
                      + f"; corpus: {len(corpus)} lines in {len(corpus_keys)} file(s)")
        self.data_hash = T.data_hash(a.lang, [raw, a.text_col.encode(), *corpus_raw])
        self.text_tokens, self.corpus_tokens = T.tokenize_cached(
            self.bucket, a.lang, self.data_hash, self.data.texts, corpus, self.log)
        self.train_idx, self.valid_idx = T.split_rows(len(self.data.texts), a.valid_pct, a.seed)

    def fit_phases(self, learn, stage: str, phases: list[tuple]) -> None:
        """phases: (freeze_to or None for all layers, epochs, lr). Resumable per epoch."""
        meta = self.checkpoint_meta(stage)
        learn.remove_cb(ProgressCallback)
        learn.logger = lambda *_: None  # Recorder would print raw lists; EpochLogCallback logs
        learn.add_cbs([self.preempt, self.epoch_log, self.status_cb, self.ckpt])
        total = sum(n for _, n, _ in phases)
        offset = 0
        for i, (freeze_to, n, lr) in enumerate(phases):
            start = 0
            if meta is not None:
                if i < meta["phase"]:
                    offset += n
                    continue
                if i == meta["phase"]:
                    start = meta["epochs_done"]
            learn.unfreeze() if freeze_to is None else learn.freeze_to(freeze_to)
            if meta is not None and i == meta["phase"]:
                ckpt = self.work / f"resume-{stage}.pth"
                self.bucket.download(self.key(f"checkpoints/{stage}.ckpt.pth"), ckpt)
                learn.load(ckpt.with_suffix(""), with_opt=True)
                self.log.line(f"{stage}: resumed at phase {i + 1}, epoch {start + 1} from checkpoint")
            if start < n:
                self.epoch_log.stage, self.epoch_log.phase, self.epoch_log.total = stage, f"{i + 1}/{len(phases)}", total
                self.epoch_log.offset = self.status_cb.offset = offset
                self.ckpt.stage, self.ckpt.phase_idx = stage, i
                learn.fit_one_cycle(n, lr, start_epoch=start)
                if self.preempt.requested:
                    raise Interrupted()
            offset += n

    def base_lm(self):
        a = self.a
        models = self.work / "models"
        if all(self.bucket.exists(f"{a.lang}/{k}") for k in LM_KEYS):
            for k in LM_KEYS:
                self.bucket.download(f"{a.lang}/{k}", models / Path(k).name)
            lm_meta = json.loads((models / "meta.json").read_text())
            if lm_meta["arch"] != self.arch:
                self.log.line(f"base LM in {a.lang}/lm/ has arch {lm_meta['arch']}; using it (config asked {self.arch})")
                self.arch = lm_meta["arch"]
            self.stage("base_lm")
            self.log.line(f"base LM: reused {self.bucket.url(a.lang + '/lm/')} (trained {lm_meta.get('trained_at')})")
            return
        self.stage("base_lm", a.epochs_base_lm)
        tokens = self.corpus_tokens + [self.text_tokens[i] for i in self.train_idx]
        vocab = T.build_vocab(tokens, min_freq=a.min_freq, max_vocab=a.max_vocab)
        set_seed(a.seed, reproducible=True)
        dls = T.lm_dataloaders(tokens, vocab, bs=a.bs, seq_len=a.seq_len, seed=a.seed)
        learn = language_model_learner(dls, AWD_LSTM, config={**awd_lstm_lm_config, **self.arch},
                                       drop_mult=a.drop_mult, pretrained=False, path=self.work,
                                       metrics=[accuracy, Perplexity()])
        self.fit_phases(learn, "base_lm", [(None, a.epochs_base_lm, a.lr_lm)])
        torch.save(learn.model.state_dict(), models / "weights.pth")
        (models / "vocab.pkl").write_bytes(pickle.dumps(list(vocab)))
        meta = {"arch": self.arch, "vocab_size": len(vocab), "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "run_id": a.run_id, "data_hash": self.data_hash, "epochs": a.epochs_base_lm}
        (models / "meta.json").write_text(json.dumps(meta, indent=2))
        for k in LM_KEYS:  # meta last: a reader only trusts lm/ once meta.json exists
            self.bucket.write_bytes(f"{a.lang}/{k}", (models / Path(k).name).read_bytes(), if_absent=True)
        self.log.line(f"base LM: saved to {self.bucket.url(a.lang + '/lm/')} for later runs")

    def lm_finetune(self):
        a = self.a
        models = self.work / "models"
        if self.resume and self.bucket.exists(self.key("checkpoints/lm_encoder.ckpt.pth")):
            self.bucket.download(self.key("checkpoints/lm_encoder.ckpt.pth"), models / "ft_enc.pth")
            self.bucket.download(self.key("checkpoints/lm_vocab.ckpt.pkl"), models / "ft_vocab.pkl")
            self.ft_vocab = pickle.loads((models / "ft_vocab.pkl").read_bytes())
            self.log.line("lm_finetune: finished before the interruption; reusing its encoder")
            return
        self.stage("lm_finetune", a.epochs_lm)
        self.ft_vocab = T.build_vocab(self.text_tokens, min_freq=a.min_freq, max_vocab=a.max_vocab)
        set_seed(a.seed, reproducible=True)
        dls = T.lm_dataloaders(self.text_tokens, self.ft_vocab, bs=a.bs, seq_len=a.seq_len, seed=a.seed)
        learn = language_model_learner(dls, AWD_LSTM, config={**awd_lstm_lm_config, **self.arch},
                                       drop_mult=a.drop_mult, pretrained_fnames=["weights", "vocab"],
                                       path=self.work, metrics=[accuracy, Perplexity()])
        phases = [(-1, min(1, a.epochs_lm), a.lr_lm), (None, max(0, a.epochs_lm - 1), a.lr_lm / 10)]
        self.fit_phases(learn, "lm_finetune", [p for p in phases if p[1] > 0])
        learn.save_encoder("ft_enc")
        (models / "ft_vocab.pkl").write_bytes(pickle.dumps(list(self.ft_vocab)))
        self.put(models / "ft_vocab.pkl", "checkpoints/lm_vocab.ckpt.pkl")
        self.put(models / "ft_enc.pth", "checkpoints/lm_encoder.ckpt.pth")

    def classifier(self):
        a = self.a
        self.stage("classifier", a.epochs_clf)
        set_seed(a.seed, reproducible=True)
        self.dls = T.classifier_dataloaders(self.data, a.lang, self.ft_vocab, (self.train_idx, self.valid_idx),
                                            bs=a.bs, seq_len=a.seq_len)
        multi = self.data.multi_label
        metrics = ([accuracy_multi, F1ScoreMulti(average="macro")] if multi
                   else [accuracy, F1Score(average="macro")])
        learn = text_classifier_learner(self.dls, AWD_LSTM, config={**awd_lstm_clas_config, **self.arch},
                                        drop_mult=a.drop_mult, pretrained=False, seq_len=a.seq_len,
                                        path=self.work, metrics=metrics)
        learn.load_encoder("ft_enc")
        lr, d = a.lr, 2.6 ** 4  # ULMFiT: discriminative rates, lr/2.6 per layer group down
        phases = [(-1, 1, lr), (-2, 1, slice(lr / 2 / d, lr / 2)), (-3, 1, slice(lr / 4 / d, lr / 4)),
                  (None, a.epochs_clf - 3, slice(lr / 10 / d, lr / 10))]
        left, trimmed = a.epochs_clf, []
        for freeze_to, n, rate in phases:
            n = min(n, left)
            if n > 0:
                trimmed.append((freeze_to, n, rate))
            left -= n
        self.fit_phases(learn, "classifier", trimmed)
        learn.remove_cbs([self.preempt, self.epoch_log, self.status_cb, self.ckpt])
        self.learn = learn

    def evaluate(self) -> dict:
        self.stage("evaluating")
        probs, targs = self.learn.get_preds(ds_idx=1)
        probs = probs.numpy()
        labels = self.data.label_names
        if self.data.multi_label:
            targets = targs.numpy().astype(int)
            thresholds = M.choose_thresholds(probs, targets)
        else:
            targets = np.eye(len(labels), dtype=int)[targs.numpy().astype(int)]
            thresholds = None
        pred = M.decide(probs, multi_label=self.data.multi_label, thresholds=thresholds)
        result = M.score(pred, targets, labels, thresholds)
        all_targets = np.array([[int(l in row) for l in labels] for row in self.data.labels])
        baseline = M.majority_baseline(all_targets[self.train_idx], targets, labels)
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["row_id", "text", "true_labels", "pred_labels", *[f"prob_{l}" for l in labels]])
        for n, i in enumerate(self.valid_idx):
            w.writerow([self.data.row_ids[i], self.data.texts[i], ";".join(self.data.labels[i]),
                        ";".join(l for l, p in zip(labels, pred[n]) if p), *[f"{p:.4f}" for p in probs[n]]])
        self.predictions_csv = out.getvalue().encode()
        self.log.line(f"validation: macro-F1 {result['macro_f1']:.3f}, micro-F1 {result['micro_f1']:.3f}, "
                      f"accuracy {result['accuracy']:.3f} (majority baseline macro-F1 {baseline['macro_f1']:.3f})")
        return {"labels": labels, "multi_label": self.data.multi_label, **result, "baseline": baseline,
                "n_train": len(self.train_idx), "n_valid": len(self.valid_idx)}

    def upload(self, result: dict, started: float) -> None:
        a = self.a
        self.stage("uploading")
        self.learn.export(self.work / "model.pth")
        self.put(self.work / "model.pth", "model.pth")
        self.put(self.predictions_csv, "valid_predictions.csv")
        plot = plot_history(self.history, self.work / "history.png")
        if plot:
            self.put(plot, "plots/history.png")
        meta = {"args": vars(a), "data_hash": self.data_hash, "arch": self.arch, "python": sys.version.split()[0],
                "torch": torch.__version__, "fastai": fastai.__version__, "platform": platform.platform(),
                "device": "cuda" if torch.cuda.is_available() else "cpu",
                "image": __import__("os").environ.get("TRAINSTACK_IMAGE")}
        self.put(json.dumps(meta, indent=2, default=str).encode(), "metadata/trainer.json")
        metrics = {"run_id": a.run_id, "lang": a.lang, **result, "duration_s": round(time.time() - started, 1),
                   "history": self.history}
        # metrics.json last: its presence means every other artifact is in place.
        self.put(json.dumps(metrics, indent=2).encode(), "metrics.json")


def plot_history(history: list[dict], path: Path) -> Path | None:
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for key in ("train_loss", "valid_loss"):
        ax.plot(range(1, len(history) + 1), [h.get(key) for h in history], label=key, marker="o")
    ax.set_xlabel("epoch (all stages)")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def run_training(args) -> int:
    bucket = open_bucket(args.bucket)
    status = read_status(bucket, args.lang, args.run_id)
    if status is not None and status.terminal:
        err = RunExistsError(f"run {args.run_id} already ended ({status.state}); its files are kept as they are",
                             hint="start a new run id")
        print(f"error: {err.message}\n  {err.hint}", file=sys.stderr)
        return 2
    resume = status is not None and status.state == RUNNING
    if status is None:
        status = RunStatus(run_id=args.run_id, lang=args.lang, env=args.env)
    if resume:
        status.resumed += 1
    log = RunLog(bucket, status)
    log.started()
    log.line(f"run {args.run_id} ({args.lang}, env {args.env})" + (f", resume #{status.resumed}" if resume else ""))
    started = time.time()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    try:
        run = Run(args, bucket, log, resume)
        run.prepare()
        run.base_lm()
        run.lm_finetune()
        run.classifier()
        result = run.evaluate()
        run.upload(result, started)
        log.succeeded()
        log.line(f"SUCCEEDED in {time.time() - started:.0f}s")
        log.flush()
        return 0
    except Interrupted:
        log.line("interrupted (SIGTERM): checkpoint saved; rerun with the same run id to resume")
        log.update(stage="interrupted")
        return 143
    except DataError as exc:
        log.failed(exc.message + (f" ({exc.hint})" if exc.hint else ""))
        return 2
    except Exception as exc:  # the run must end with a status, whatever happened
        traceback.print_exc()
        log.failed(f"{type(exc).__name__}: {exc}")
        return 1
