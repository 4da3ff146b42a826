"""Numeric precision and determinism of a run: the one place that decides bf16/fp16/fp32, GPU and CPU.

GPU: bf16 mixed precision where the card has it (Ampere and later), else fp16 with loss scaling.
CPU: bf16 autocast where the CPU computes bf16 natively (AVX-512 BF16 or AMX: an LM step ran ~1.5x
faster than fp32 when measured on such a CPU), else fp32 whatever was asked (oneDNN has no bf16 LSTM elsewhere). Weights
and optimizer state stay fp32 either way (autocast casts per operation).
"""

from __future__ import annotations

from pathlib import Path

import torch
from fastai.callback.core import Callback
from fastai.torch_core import set_seed, to_float

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU flag that says bf16 runs natively here (avx512_bf16 / amx_bf16), or None."""
    try:
        flags = next(
            (line.split(":", 1)[1].split() for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), []
        )
    except OSError:
        return None
    return next((f for f in CPU_BF16_FLAGS if f in flags), None)


def resolve(requested: str) -> str:
    """The precision a run uses for `requested` (trainer.precision) on this machine."""
    if not torch.cuda.is_available():
        # oneDNN has no bf16 LSTM without native bf16 ("could not create a primitive descriptor"),
        # and no fp16 one: fp32 there, whatever was asked
        return "bf16" if requested in ("auto", "bf16") and cpu_bf16() else "fp32"
    if requested == "auto":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if requested == "bf16" and not torch.cuda.is_bf16_supported():
        return "fp16"
    return requested


def cpu_autocast(resolved: str) -> bool:
    """bf16 autocast on a CPU: weights that differ from fp32 ones, so LM ids record it."""
    return resolved == "bf16" and not torch.cuda.is_available()


def describe(requested: str, resolved: str) -> str:
    """One log line: the precision in use and why (said once, at the start of a run)."""
    if torch.cuda.is_available():
        return f"precision: {resolved} on GPU (trainer.precision {requested})"
    if resolved == "bf16":
        return f"precision: bf16 autocast on CPU (it has {cpu_bf16()}; trainer.precision {requested})"
    if requested == "fp32":
        return "precision: fp32 on CPU (trainer.precision fp32)"
    if requested == "fp16":
        return "precision: fp32 on CPU (trainer.precision fp16: no fp16 path on CPU)"
    return f"precision: fp32 on CPU (trainer.precision {requested}: this CPU has no avx512_bf16 or amx_bf16)"


class CpuAutocast(Callback):
    """bf16 autocast around each batch's forward pass and loss on the CPU (fastai's MixedPrecision is CUDA's)."""

    order = 10

    def __init__(self):
        self.autocast = None

    def before_batch(self):
        self.autocast = torch.autocast("cpu", dtype=torch.bfloat16)
        self.autocast.__enter__()

    def after_pred(self):
        learn = self.learn  # read directly: a callback's own lookup falls back to the learner's (microseconds)
        learn.pred = to_float(learn.pred)

    def after_loss(self):
        self._leave()

    def after_batch(self):
        self._leave()  # a batch cancelled before its loss (e.g. skipped on resume) leaves no autocast behind

    def after_cancel_batch(self):
        self._leave()

    def _leave(self):
        if self.autocast is not None:
            self.autocast.__exit__(None, None, None)
            self.autocast = None


def apply(learn, precision: str):
    """Adds mixed precision to `learn`: fastai's MixedPrecision on GPU (fp16 with its dynamic loss
    scaler), CpuAutocast for bf16 on CPU."""
    if precision == "bf16":
        return learn.to_bf16() if torch.cuda.is_available() else learn.add_cb(CpuAutocast())
    if precision == "fp16":
        return learn.to_fp16()
    return learn


def seed_everything(seed: int, *, deterministic: bool) -> None:
    """Same seed + same data = same metrics on CPU; on GPU cuDNN autotuning unless `deterministic`."""
    on_gpu = torch.cuda.is_available()
    set_seed(seed, reproducible=deterministic or not on_gpu)
    if on_gpu and not deterministic:
        torch.backends.cudnn.deterministic = False
        torch.backends.cudnn.benchmark = True
