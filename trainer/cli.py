"""`python -m trainer`: train one language's ULMFiT classifier from a bucket.

Argument parsing only; the work is in trainer.pipeline (imported after parsing,
so `--help` is instant and the supervisor can reuse the parser).
"""
from __future__ import annotations

import argparse
import sys

DEFAULTS = dict(
    epochs_base_lm=10, epochs_lm=4, epochs_clf=6, bs=64, lr=2e-2, lr_lm=2e-2, seq_len=72,
    drop_mult=0.5, seed=42, valid_pct=0.2, emb_sz=400, n_hid=1152, n_layers=3,
    max_vocab=60000, min_freq=2, precision="auto", deterministic=False, checkpoint_minutes=10.0,
    tokenizer="auto", sp_vocab_size=16000, base_lm="current", min_clf_steps=400,
    bidirectional=False, progress_seconds=60.0, max_lm_tokens=0,
)
HELP = dict(
    epochs_base_lm="epochs of an inline base LM (--base-lm pretrain-inline)",
    epochs_lm="epochs to fine-tune the LM on the task texts (first one frozen)",
    epochs_clf="classifier epochs (gradual unfreezing: 1 per layer group, the rest unfrozen)",
    bs="batch size", lr="classifier max learning rate", lr_lm="language-model max learning rate",
    seq_len="BPTT length / classifier chunk length", drop_mult="AWD-LSTM dropout multiplier",
    seed="random seed (same seed + same data = same metrics on CPU)",
    valid_pct="share of labelled rows held out for validation",
    emb_sz="embedding size (new base LM only)", n_hid="LSTM hidden size (new base LM only)",
    n_layers="LSTM layers (new base LM only)", max_vocab="vocabulary cap", min_freq="min token count for the vocabulary",
    precision="auto (bf16 where the GPU supports it, else fp16 with loss scaling; fp32 on CPU), fp32, bf16 or fp16",
    deterministic="GPU: deterministic cuDNN kernels instead of autotuned ones (CPU runs are always deterministic)",
    checkpoint_minutes="also checkpoint inside an epoch after this many minutes (0 = at epoch ends only)",
    tokenizer="spacy (words), sentencepiece (unigram subwords trained on the run's data), or auto: "
              "sentencepiece for languages without spaces between words or without a plain spaCy tokenizer",
    sp_vocab_size="SentencePiece vocabulary size (smaller when the data cannot fill it)",
    min_clf_steps="more classifier epochs on small data: at least this many optimizer steps "
                  "(at most 100 epochs; 0 = exactly epochs_clf)",
    bidirectional="also train a backward LM and classifier (texts read right to left) and report the "
                  "forward+backward ensemble next to the forward model (ULMFiT; about twice the training time)",
    progress_seconds="inside an epoch, a progress line (batch, tokens/s, ETA) in log.txt and status.json "
                     "this often (0 = every batch)",
    max_lm_tokens="the most tokens a base-LM pretrain trains on, all epochs together (0 = no cap): fewer "
                  "epochs, and one epoch over a larger corpus reads a seeded sample of its texts",
    base_lm="base LM to fine-tune from: current (<lang>/lm/CURRENT; none published: no base LM), an lm id, "
            "none, or pretrain-inline (CURRENT, else pretrain one on the corpus + training rows and publish it)",
)


def _flag(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


PARSERS = {bool: _flag}
CHOICES = {"precision": ("auto", "fp32", "bf16", "fp16"), "tokenizer": ("auto", "spacy", "sentencepiece")}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer",
        description="Train a ULMFiT text classifier (base LM -> LM fine-tuning -> classifier) "
        "from <bucket>/<lang>/data/ and upload model.pth, metrics.json and predictions to "
        "<bucket>/<lang>/runs/<run-id>/.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--lang", required=True, help="language key, the bucket prefix (e.g. fr)")
    p.add_argument("--lang-code", default=None, help="ISO 639-1 code for the tokenizer (default: --lang)")
    p.add_argument("--bucket", required=True, help="file:///path or gs://bucket[/prefix]")
    p.add_argument("--run-id", required=True, help="run folder name; an unfinished run with this id is resumed")
    p.add_argument("--env", default="local", help="environment name recorded in status.json")
    p.add_argument("--text-col", default="text", help="text column of the labelled data")
    p.add_argument("--label-col", default="labels", help="label column: a label, labels separated by --label-sep, or a list")
    p.add_argument("--label-sep", default=";", help="separator of several labels (multi-label)")
    p.add_argument("--label-cols", action="append", default=[], metavar="COL",
                   help="a 0/1 column per label instead of --label-col (repeat for each label)")
    p.add_argument("--task", default="auto", choices=("auto", "single_label", "multi_label"),
                   help="auto: multi-label when a row has several labels")
    p.add_argument("--job", default="classifier", choices=("classifier", "pretrain-lm"),
                   help="classifier: the ULMFiT run; pretrain-lm: pretrain a base LM on <lang>/data/corpus/ "
                        "and publish it to <lang>/lm/<id>/ (CURRENT)")
    p.add_argument("--work-dir", default=None, help="local scratch folder (default: a temp dir)")
    for name, default in DEFAULTS.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=PARSERS.get(type(default), type(default)), default=default,
                       choices=CHOICES.get(name), help=HELP[name])
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from trainer.pipeline import run_training

    return run_training(args)


if __name__ == "__main__":
    sys.exit(main())
