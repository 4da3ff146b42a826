"""Benchmark: classifier epoch time before/after cached ids, checkpoint overhead, resume latency, GPU precision.

    .venv/bin/python -m benchmarks.trainer [--rows 20000] [--gpu-rows 100000]

Data: a synthetic multi-label dataset made here (seeded; French-like rows of 5-80 words
drawn from the sample's vocabulary, labels tied to keywords), never committed.
Figures:
  1. one classifier epoch with per-epoch tokenization (the trainer before the token cache:
     fastai Datasets with Tokenizer + Numericalize, SortedDL measuring lengths by tokenizing)
     vs the same epoch from cached ids (trainer.text.loaders), same model and batch size;
  2. checkpoint overhead: one exact-resume checkpoint (model, optimizer, RNG) as % of the epoch;
  3. time from a resumed trainer's start to its first step after a SIGTERM mid-classifier;
  4. with a GPU: LM and classifier tokens/s at fp32 vs bf16/fp16 (base.yaml model size),
     GPU utilisation sampled with nvidia-smi during the mixed-precision epochs.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LABELS = {
    "livraison": ["colis", "livraison", "suivi"],
    "facturation": ["facture", "paiement", "remboursement"],
    "compte": ["compte", "mot", "connexion"],
    "produit": ["produit", "taille", "qualité"],
}


def make_dataset(path: Path, rows: int, seed: int = 0) -> None:
    words = re.findall(r"[a-zàâçéèêëîïôûùüÿœ']+", (REPO / "data/sample/fr/train.csv").read_text().lower())
    rng = random.Random(seed)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "labels"])
        for _ in range(rows):
            tags = rng.sample(sorted(LABELS), 2 if rng.random() < 0.25 else 1)
            body = [rng.choice(words) for _ in range(rng.randint(5, 80))]
            for tag in tags:
                body.insert(rng.randrange(len(body)), rng.choice(LABELS[tag]))
            w.writerow([" ".join(body).capitalize() + ".", ";".join(tags)])


def timed_epoch(learn) -> float:
    start = time.perf_counter()
    learn.fit(1, 1e-3)
    return time.perf_counter() - start


def quiet_classifier(dls, config: dict):
    """An untrained AWD-LSTM classifier over `dls` that prints nothing while it fits."""
    from fastai.text.all import AWD_LSTM, ProgressCallback, text_classifier_learner

    learn = text_classifier_learner(dls, AWD_LSTM, config=config, pretrained=False, seq_len=72)
    learn.remove_cb(ProgressCallback)
    learn.logger = lambda *_: None
    return learn


def per_epoch_tokenizing_dataloaders(data, vocab: list[str], splits: tuple, bs: int):
    """The trainer before the token cache: fastai Datasets that tokenize every epoch, SortedDL measuring
    lengths by tokenizing -> (dataloaders, setup seconds)."""
    import pandas as pd
    from fastai.text.all import (
        ColReader,
        Datasets,
        MultiCategorize,
        Numericalize,
        OneHotEncode,
        Pad_Chunk,
        SortedDL,
        Tokenizer,
        WordTokenizer,
    )

    df = pd.DataFrame({"text": data.texts, "labels": data.labels})
    t0 = time.perf_counter()
    dsets = Datasets(
        df,
        [
            [ColReader("text"), Tokenizer(WordTokenizer("fr")), Numericalize(vocab=vocab)],
            [ColReader("labels"), MultiCategorize(vocab=data.label_names), OneHotEncode(len(data.label_names))],
        ],
        splits=list(splits),
        dl_type=SortedDL,
    )
    dls = dsets.dataloaders(bs=bs, before_batch=Pad_Chunk(seq_len=72), num_workers=0)
    return dls, time.perf_counter() - t0


def cached_ids_dataloaders(data, tokens, vocab: list[str], splits: tuple, bs: int):
    """The same rows from the tokens made once (trainer.text.loaders) -> (dataloaders, setup seconds); the
    setup includes mapping the tokens to `vocab`, as a run's does."""
    from trainer.text.loaders import classifier_dataloaders
    from trainer.text.tokens import remap

    t0 = time.perf_counter()
    dls = classifier_dataloaders(
        remap(tokens, vocab),
        data.labels,
        multi_label=True,
        label_names=data.label_names,
        splits=splits,
        bs=bs,
        seq_len=72,
    )
    return dls, time.perf_counter() - t0


def timed_checkpoint(learn, work: Path) -> tuple[float, int]:
    """(seconds, bytes) of one exact-resume checkpoint of `learn`: model, optimizer, RNG."""
    from trainer.runtime.checkpoints import CheckpointStore, Position, rng_state
    from trainer.storage import open_bucket

    store = CheckpointStore(open_bucket(f"file://{work / 'bucket'}"), "fr", "bench", work)
    t0 = time.perf_counter()
    store.save(
        Position("classifier", 1, 1, 0),
        {
            "model": learn.model.state_dict(),
            "opt": learn.opt.state_dict(),
            "rng": [{"epoch": rng_state(), "now": rng_state()}],
        },
    )
    ckpt_s = time.perf_counter() - t0
    return ckpt_s, sum(p.stat().st_size for p in (work / "bucket").rglob("*.ckpt.pt"))


def epoch_before_after(csv_path: Path, work: Path, args) -> dict:
    """Figures 1 and 2: one classifier epoch tokenizing every epoch vs from cached ids, and one checkpoint."""
    from fastai.text.all import awd_lstm_clas_config

    from trainer.data.labelled import parse_labelled_csv
    from trainer.data.splits import make_splits
    from trainer.text.tokens import build_vocab, tokenize

    data = parse_labelled_csv(csv_path.read_bytes(), text_col="text", label_col="labels", label_sep=";", source="bench")
    s = make_splits(data, valid_pct=0.1, seed=42)
    splits = (s.train, s.valid)
    t0 = time.perf_counter()
    tokens = tokenize(data.texts, "fr")
    tokenize_s = time.perf_counter() - t0
    vocab = build_vocab([tokens], min_freq=2, max_vocab=60000)
    config = {**awd_lstm_clas_config, "emb_sz": args.emb_sz, "n_hid": args.n_hid, "n_layers": args.n_layers}
    old, old_setup_s = per_epoch_tokenizing_dataloaders(data, vocab, splits, args.bs)
    before_s = timed_epoch(quiet_classifier(old, config))
    new, new_setup_s = cached_ids_dataloaders(data, tokens, vocab, splits, args.bs)
    learn = quiet_classifier(new, config)
    after_s = timed_epoch(learn)
    ckpt_s, size = timed_checkpoint(learn, work)
    return {
        "rows": len(data.texts),
        "tokens": tokens.n_tokens,
        "tokenize_once_s": round(tokenize_s, 2),
        "before": {"setup_s": round(old_setup_s, 2), "epoch_s": round(before_s, 2)},
        "after": {"setup_s": round(new_setup_s, 2), "epoch_s": round(after_s, 2)},
        "speedup_epoch": round(before_s / after_s, 2),
        "checkpoint": {"seconds": round(ckpt_s, 3), "bytes": size, "pct_of_epoch": round(100 * ckpt_s / after_s, 2)},
        "model": {"emb_sz": args.emb_sz, "n_hid": args.n_hid, "n_layers": args.n_layers, "bs": args.bs},
    }


def resume_latency(csv_path: Path, work: Path) -> dict:
    """SIGTERM a trainer mid-classifier, start it again, time its start to the resumed first step."""
    bucket = work / "resume-bucket"
    (bucket / "fr/data").mkdir(parents=True)
    (bucket / "fr/data/train.csv").write_bytes(csv_path.read_bytes())
    cmd = [
        sys.executable,
        "-m",
        "trainer",
        "--lang",
        "fr",
        "--bucket",
        f"file://{bucket}",
        "--run-id",
        "r",
        "--epochs-base-lm",
        "1",
        "--epochs-lm",
        "1",
        "--epochs-clf",
        "4",
        "--emb-sz",
        "32",
        "--n-hid",
        "64",
        "--n-layers",
        "1",
        "--checkpoint-minutes",
        "0",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if "classifier [" in line:
            break
    time.sleep(1.0)  # inside the second classifier epoch
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    stop_s = time.perf_counter() - sent
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = None
    for line in proc.stdout:
        if first is None and "resumed at" in line:
            first = time.perf_counter() - start
    proc.wait()
    return {
        "sigterm_to_exit_s": round(stop_s, 2),
        "start_to_resumed_step_s": round(first or -1, 2),
        "exit_codes": "143 then " + str(proc.returncode),
    }


class GpuSampler(threading.Thread):
    """nvidia-smi utilisation every 0.5 s while running."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stopped = [], threading.Event()

    def run(self):
        while not self.stopped.is_set():
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
            ).stdout.split()
            if out:
                self.samples.append(float(out[0]))
            time.sleep(0.5)


def gpu_precision(csv_path: Path) -> dict:
    import torch
    from fastai.text.all import (
        AWD_LSTM,
        ProgressCallback,
        awd_lstm_clas_config,
        awd_lstm_lm_config,
        language_model_learner,
        text_classifier_learner,
    )

    from trainer.data.labelled import parse_labelled_csv
    from trainer.data.splits import make_splits
    from trainer.runtime import precision as P
    from trainer.text.loaders import classifier_dataloaders, lm_dataloaders
    from trainer.text.tokens import build_vocab, remap, tokenize

    data = parse_labelled_csv(csv_path.read_bytes(), text_col="text", label_col="labels", label_sep=";", source="bench")
    tokens = tokenize(data.texts, "fr")
    vocab = build_vocab([tokens], min_freq=2, max_vocab=60000)
    ids = remap(tokens, vocab)
    s = make_splits(data, valid_pct=0.1, seed=42)
    splits = (s.train, s.valid)
    out = {"gpu": torch.cuda.get_device_name(0), "mixed": P.resolve("auto")}
    for kind in ("lm", "classifier"):
        for precision in ("fp32", out["mixed"]):
            if kind == "lm":
                dls = lm_dataloaders(ids, bs=128, seq_len=72, seed=42)
                learn = language_model_learner(dls, AWD_LSTM, config=awd_lstm_lm_config, pretrained=False)
                n_tokens = len(dls.train) * 128 * 72
            else:
                dls = classifier_dataloaders(
                    ids, data.labels, multi_label=True, label_names=data.label_names, splits=splits, bs=128, seq_len=72
                )
                learn = text_classifier_learner(dls, AWD_LSTM, config=awd_lstm_clas_config, pretrained=False)
                n_tokens = int(ids.select(splits[0]).n_tokens)
            learn.remove_cb(ProgressCallback)
            learn.logger = lambda *_: None
            P.apply(learn, precision)
            sampler = GpuSampler()
            sampler.start()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            learn.fit(1, 1e-3)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            sampler.stopped.set()
            util = sampler.samples[2:] or sampler.samples
            out[f"{kind}_{precision}"] = {
                "epoch_s": round(seconds, 2),
                "tokens_per_s": round(n_tokens / seconds),
                "gpu_util_mean_pct": round(sum(util) / max(1, len(util)), 1),
            }
        out[f"{kind}_speedup"] = round(
            out[f"{kind}_{out['mixed']}"]["tokens_per_s"] / out[f"{kind}_fp32"]["tokens_per_s"], 2
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20000, help="rows of the CPU benchmarks")
    parser.add_argument("--gpu-rows", type=int, default=100000, help="rows of the GPU precision benchmark")
    parser.add_argument("--bs", type=int, default=64)
    parser.add_argument("--emb-sz", type=int, default=64)
    parser.add_argument("--n-hid", type=int, default=128)
    parser.add_argument("--n-layers", type=int, default=1)
    args = parser.parse_args()
    import torch

    report = {
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"{'GPU ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}, "
        f"torch {torch.__version__}"
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "train.csv"
        make_dataset(data, args.rows)
        report["epoch"] = epoch_before_after(data, work, args)
        report["resume"] = resume_latency(data, work)
        if torch.cuda.is_available():
            big = work / "big.csv"
            make_dataset(big, args.gpu_rows)
            report["gpu_precision"] = gpu_precision(big)
        else:
            report["gpu_precision"] = "no GPU on this machine: fp32 vs bf16/fp16 and utilisation not measured"
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
