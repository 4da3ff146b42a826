"""Benchmark: fastai's own stock ULMFiT pipeline on a real task's rows, from the same base LM as the trainer.

    .venv/bin/python -m benchmarks.ulmfit_stock --lm-bucket file://DIR [--task en_imdb] [--size 100]
        [--seed 0] [--test-rows 2000] [--lm-tokens 3000000] [--epochs-lm 6] [--json-out FILE]

The mechanics check of our ULMFiT: TextDataLoaders + language_model_learner (fastai's full softmax,
the base LM's published weights through LMLearner.load_pretrained) + text_classifier_learner +
load_encoder, with the recipe of fastai's text tutorial (one frozen LM epoch at 2e-2, the rest
unfrozen at 2e-3; the classifier unfrozen one layer group at a time, 2e-2, 1e-2, 5e-3, then 2
epochs at 1e-3, rates spread by 2.6 per group), on the same training, validation and test rows
as benchmarks.real_tasks (make_cells) and about the same unlabelled tokens (a seeded sample of the
task's unlabelled.csv, words x 1.25 as the token estimate). Prints the LM's held-out perplexity,
a linear probe of the fine-tuned encoder (trainer.classification.probe on fastai's concat
pooling) and the classifier's test accuracy and macro-F1. If this beats `python -m trainer` on the
same rows and LM, the difference is a defect in the trainer.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.real_tasks import DATASETS, f1s, make_cells


def unlabelled_sample(task: str, tokens: int, seed: int, exclude: set[str]) -> list[str]:
    with (DATASETS / task / "unlabelled.csv").open(encoding="utf-8", newline="") as f:
        texts = [r["text"] for r in csv.DictReader(f) if r["text"].strip() and r["text"] not in exclude]
    random.Random(seed).shuffle(texts)
    out, used = [], 0
    for text in texts:
        if used >= tokens:
            break
        out.append(text)
        used += int(len(text.split()) * 1.25)
    return out


def pooled(learn, dl) -> np.ndarray:
    """The classifier head's input (fastai's masked concat pooling) for every row of `dl`, in its row order."""
    import torch
    from fastai.text.models.core import masked_concat_pool

    encoder = learn.model[0]
    encoder.eval()
    feats = []
    with torch.no_grad():
        for xb, *_ in dl:
            out, mask = encoder(xb)
            feats.append(masked_concat_pool(out.float(), mask, encoder.bptt).numpy())
    x = np.concatenate(feats)
    order = np.argsort(np.asarray(dl.get_idxs()))  # SortedDL reads longest first: back to row order
    return x[order]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lm-bucket", required=True)
    parser.add_argument("--task", default="en_imdb")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-rows", type=int, default=2000)
    parser.add_argument("--lm-tokens", type=int, default=3_000_000)
    parser.add_argument("--epochs-lm", type=int, default=6)
    parser.add_argument("--bs", type=int, default=32)
    parser.add_argument("--json-out", type=Path)
    return parser.parse_args()


def current_lm(lm_bucket: str, task: str) -> tuple[Path, dict]:
    """(the folder of the task's language's CURRENT base LM in the local bucket, its arch)."""
    lang = task.split("_", 1)[0]
    root = Path(lm_bucket.removeprefix("file://")) / lang / "lm"
    lm_dir = root / json.loads((root / "CURRENT").read_text())["id"]
    return lm_dir, json.loads((lm_dir / "meta.json").read_text())["arch"]


def fine_tune_lm(lm_texts: list[str], lm_dir: Path, arch: dict, work: Path, args):
    """fastai's LM fine-tuning from the base LM's weights -> (its dataloaders, held-out perplexity); the
    fine-tuned encoder is saved in `work` as "ft"."""
    import pandas as pd
    from fastai.text.all import (
        AWD_LSTM,
        Perplexity,
        TextDataLoaders,
        accuracy,
        awd_lstm_lm_config,
        language_model_learner,
    )

    dls_lm = TextDataLoaders.from_df(
        pd.DataFrame({"text": lm_texts}),
        path=work,
        text_col="text",
        is_lm=True,
        valid_pct=0.1,
        bs=args.bs,
        seq_len=72,
        seed=args.seed,
    )
    lm = language_model_learner(
        dls_lm,
        AWD_LSTM,
        config={**awd_lstm_lm_config, **arch},
        drop_mult=0.3,
        pretrained=False,
        metrics=[accuracy, Perplexity()],
        path=work,
    )
    lm.load_pretrained(lm_dir / "weights.pth", lm_dir / "vocab.pkl")
    lm.freeze()
    lm.fit_one_cycle(1, 2e-2)
    lm.unfreeze()
    lm.fit_one_cycle(args.epochs_lm - 1, 2e-3)
    perplexity = float(lm.validate()[2])
    lm.save_encoder("ft")
    return dls_lm, perplexity


def classifier_learner(cell, vocab, arch: dict, work: Path, args):
    """fastai's text classifier on the cell's training and validation rows, with the fine-tuned encoder."""
    import pandas as pd
    from fastai.text.all import AWD_LSTM, TextDataLoaders, accuracy, awd_lstm_clas_config, text_classifier_learner

    df = pd.DataFrame(
        {
            "text": [*cell.train.texts, *cell.valid.texts],
            "label": [ls[0] for ls in [*cell.train.labels, *cell.valid.labels]],
            "is_valid": [False] * len(cell.train) + [True] * len(cell.valid),
        }
    )
    dls = TextDataLoaders.from_df(
        df,
        path=work,
        text_col="text",
        label_col="label",
        valid_col="is_valid",
        text_vocab=vocab,
        bs=args.bs,
        seq_len=72,
        seed=args.seed,
    )
    clf = text_classifier_learner(
        dls,
        AWD_LSTM,
        config={**awd_lstm_clas_config, **arch},
        drop_mult=0.5,
        pretrained=False,
        metrics=accuracy,
        path=work,
    )
    clf.load_encoder("ft")
    return clf


def gradual_unfreezing(clf) -> None:
    """The text tutorial's recipe: one layer group more at a time, rates spread by 2.6 per group."""
    clf.model[0].train()
    d = 2.6**4
    clf.fit_one_cycle(1, 2e-2)
    clf.freeze_to(-2)
    clf.fit_one_cycle(1, slice(1e-2 / d, 1e-2))
    clf.freeze_to(-3)
    clf.fit_one_cycle(1, slice(5e-3 / d, 5e-3))
    clf.unfreeze()
    clf.fit_one_cycle(2, slice(1e-3 / d, 1e-3))


def main() -> None:
    import torch

    from trainer.classification.probe import fit_probe

    args = parse_args()
    torch.manual_seed(args.seed)
    lm_dir, arch = current_lm(args.lm_bucket, args.task)
    [cell] = make_cells(args.task, [args.size], [args.seed], args.test_rows)
    held_out = set(cell.valid.texts) | set(cell.test.texts)
    started = time.perf_counter()
    lm_texts = list(cell.train.texts) + unlabelled_sample(args.task, args.lm_tokens, args.seed, held_out)
    work = Path(tempfile.mkdtemp(prefix="ulmfit-stock-"))
    dls_lm, perplexity = fine_tune_lm(lm_texts, lm_dir, arch, work, args)
    lm_s = time.perf_counter() - started

    labels = sorted({l for ls in cell.train.labels for l in ls})
    clf = classifier_learner(cell, dls_lm.vocab, arch, work, args)
    train_dl = clf.dls.test_dl(list(cell.train.texts))
    test_dl = clf.dls.test_dl(list(cell.test.texts))
    true = cell.targets(cell.test).astype(bool)
    y_train = cell.targets(cell.train)
    # the probe reads the encoder as the LM left it, before the classifier trains it
    probe = fit_probe(pooled(clf, train_dl), y_train, multi_label=False, seed=args.seed)
    probe_pred = np.eye(len(labels), dtype=bool)[probe.probabilities(pooled(clf, test_dl)).argmax(axis=1)]
    gradual_unfreezing(clf)
    probs, _ = clf.get_preds(dl=test_dl)
    vocab = list(clf.dls.vocab[1])
    pred = np.zeros_like(true)
    pred[np.arange(len(pred)), [labels.index(vocab[i]) for i in probs.argmax(dim=1).tolist()]] = True
    result = {
        "task": args.task,
        "size": args.size,
        "seed": args.seed,
        "lm_texts": len(lm_texts),
        "lm_perplexity": round(perplexity, 2),
        "lm_s": round(lm_s),
        "probe": f1s(probe_pred, true),
        "probe_c": probe.c,
        "classifier": f1s(pred, true),
        "wall_s": round(time.perf_counter() - started),
    }
    print(json.dumps(result), file=sys.stdout, flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
