"""The trainer's hyper-parameters, defined once: `python -m trainer` flags (trainer.cli) and the
`trainer:` block of envs/*.yaml (stacks.config.models.TrainerSettings) are both built from here; so is
the job a run does (`Job`: the one spelling of its name for the CLI, the config and the trainer)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum


class Job(str, Enum):
    """What a run of a language's stack does (the sequences: trainer/jobs/)."""

    CLASSIFIER = "classifier"  # `trainctl train`: base LM -> LM fine-tuning -> classifier -> evaluate -> upload
    PRETRAIN_LM = "pretrain-lm"  # `trainctl lm pretrain`: a base LM on <lang>/data/corpus/, published to <lang>/lm/

    def __str__(self) -> str:
        return self.value


JOBS = tuple(job.value for job in Job)


@dataclass(frozen=True)
class Param:
    """One hyper-parameter: its default, its help, and the values it may take."""

    default: object
    help: str
    choices: tuple[str, ...] | None = None
    ge: float | None = None
    gt: float | None = None
    lt: float | None = None
    le: float | None = None
    pattern: str | None = None

    def problem(self, value) -> str | None:
        """Why `value` is out of range, or None (the config model checks the same bounds)."""
        if isinstance(value, str):
            return None if self.pattern is None or re.fullmatch(self.pattern, value) else f"must match {self.pattern}"
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        if self.ge is not None and value < self.ge:
            return f"must be >= {self.ge:g}"
        if self.gt is not None and value <= self.gt:
            return f"must be > {self.gt:g}"
        if self.lt is not None and value >= self.lt:
            return f"must be < {self.lt:g}"
        if self.le is not None and value > self.le:
            return f"must be <= {self.le:g}"
        return None


PARAMS: dict[str, Param] = {
    "epochs_base_lm": Param(10, "epochs of an inline base LM (--base-lm pretrain-inline)", ge=0),
    "epochs_lm": Param(4, "epochs to fine-tune the LM on the task texts (first one frozen)", ge=0),
    "epochs_clf": Param(6, "classifier epochs (gradual unfreezing: 1 per layer group, the rest unfrozen)", ge=1),
    # Beyond 4096 sequences a batch's activations (bs x seq_len x n_hid, per layer) outgrow any one GPU.
    "bs": Param(64, "batch size", ge=1, le=4096),
    "lr": Param(2e-2, "classifier max learning rate", gt=0),
    "lr_lm": Param(2e-2, "language-model max learning rate", gt=0),
    "lr_base_lm": Param(0.0, "a new base LM's max learning rate (lm pretrain, pretrain-inline); 0 = lr_lm", ge=0),
    "seq_len": Param(72, "BPTT length / classifier chunk length", ge=8),
    # It multiplies fastai's AWD-LSTM dropouts, the largest 0.5 (the classifier's weight_p): a probability.
    "drop_mult": Param(0.5, "AWD-LSTM dropout multiplier", ge=0, le=2),
    # numpy takes seeds below 2**32, and each rank seeds with seed + its rank.
    "seed": Param(42, "random seed (same seed + same data = same metrics on CPU)", ge=0, le=2**31 - 1),
    "valid_pct": Param(0.2, "share of labelled rows held out for validation", gt=0, lt=1),
    "emb_sz": Param(400, "embedding size (new base LM only)", ge=8),
    "n_hid": Param(1152, "LSTM hidden size (new base LM only)", ge=8),
    "n_layers": Param(3, "LSTM layers (new base LM only)", ge=1),
    "lm_head": Param(
        "full",
        "the language models' output layer: full (fastai's softmax over the whole vocabulary, "
        "tied to the embedding) or adaptive (a shortlist of frequent words and clusters of "
        "rarer ones, scored against the same embedding: faster steps on a large vocabulary; "
        "published LMs keep the full layout)",
        choices=("full", "adaptive"),
    ),
    "max_vocab": Param(60000, "vocabulary cap", ge=100),
    "min_freq": Param(2, "min token count for the vocabulary", ge=1),
    "precision": Param(
        "auto",
        "auto (GPU: bf16 where the card supports it, else fp16 with loss scaling; CPU: bf16 "
        "autocast where the CPU has AVX-512 BF16 or AMX, else fp32), fp32, bf16 or fp16 (fp32 "
        "on CPU)",
        choices=("auto", "fp32", "bf16", "fp16"),
    ),
    "deterministic": Param(
        False, "GPU: deterministic cuDNN kernels instead of autotuned ones (CPU runs are always deterministic)"
    ),
    "checkpoint_minutes": Param(
        10.0, "also checkpoint inside an epoch after this many minutes (0 = at epoch ends only)", ge=0
    ),
    "tokenizer": Param(
        "auto",
        "spacy (words), sentencepiece (unigram subwords trained on the run's data), or "
        "auto: sentencepiece for languages without spaces between words or without a plain "
        "spaCy tokenizer (ja, zh, th, ko, vi, ...: trainer.text.languages)",
        choices=("auto", "spacy", "sentencepiece"),
    ),
    "sp_vocab_size": Param(16000, "SentencePiece vocabulary size (smaller when the data cannot fill it)", ge=100),
    "min_clf_steps": Param(
        400,
        "more classifier epochs on small data: at least this many optimizer steps (at most "
        "100 epochs; 0 = exactly epochs_clf)",
        ge=0,
    ),
    "bidirectional": Param(
        False,
        "also train a backward LM and classifier (texts read right to left) and report "
        "the forward+backward ensemble next to the forward model (ULMFiT; about twice "
        "the training time)",
    ),
    "class_weights": Param(
        "none",
        "weigh the classifier's loss against label imbalance: none, sqrt (rare labels by the "
        "square root of how much rarer they are) or balanced (fully)",
        choices=("none", "sqrt", "balanced"),
    ),
    "probe_head": Param(
        True,
        "the classifier's head starts from a linear probe of the fine-tuned encoder (logistic "
        "regression on its pooled states of the training rows) and skips the head-only epoch; "
        "with best_epoch the probe is epoch 0, kept unless fine-tuning beats it on validation",
    ),
    "min_valid_rows": Param(
        50,
        "with probe_head: with fewer validation rows the classifier keeps the probe's head "
        "without fine-tuning (on 25 rows a fine-tuned epoch beat the probe by noise and lost "
        "on the test rows)",
        ge=0,
    ),
    "best_epoch": Param(
        True, "the classifier keeps the weights of its epoch with the lowest validation loss, not the last epoch's"
    ),
    "patience": Param(
        10,
        "with best_epoch: the classifier stops after this many epochs without a lower validation "
        "loss (0 = runs every epoch)",
        ge=0,
    ),
    "blend_tfidf": Param(
        True,
        "also fit the blend of the classifier's and the TF-IDF baseline's probabilities (weight "
        "chosen on the validation rows) and keep it when it scores better there than the "
        "classifier alone (trainer.classification.blend)",
    ),
    "thresholds": Param(
        "shrunk",
        "multi-label decision thresholds from the validation rows: shrunk (each label's "
        "best threshold pulled towards one global threshold by its validation support) "
        "or per_label (each label's own best)",
        choices=("shrunk", "per_label"),
    ),
    "progress_seconds": Param(
        60.0,
        "inside an epoch, a progress line (batch, tokens/s, ETA) in log.txt and "
        "status.json this often (0 = every batch)",
        ge=0,
    ),
    "max_lm_tokens": Param(
        0,
        "the most tokens a base-LM pretrain trains on, all epochs together (0 = no cap, else "
        "at least 100,000): fewer epochs, and one epoch over a larger corpus reads a seeded "
        "sample of its texts; LM fine-tuning reads a seeded sample of the unlabelled texts "
        "within it",
        ge=0,
    ),
    "base_lm": Param(
        "current",
        "base LM to fine-tune from: current (<lang>/lm/CURRENT; none published: no base "
        "LM), an lm id, none, or pretrain-inline (CURRENT, else pretrain one on the corpus "
        "+ training rows and publish it)",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
    ),
}
