"""Numeric precision and determinism of a run: bf16/fp16 mixed precision on GPU, exact fp32 on CPU."""
from __future__ import annotations

import torch
from fastai.torch_core import set_seed

CHOICES = ("auto", "fp32", "bf16", "fp16")


def resolve(requested: str) -> str:
    """`auto`: bf16 where the GPU supports it (Ampere and later), else fp16 with loss scaling; fp32 on CPU."""
    if not torch.cuda.is_available():
        return "fp32"  # CPU autocast is slower than fp32 for these LSTMs, and exactness matters in tests
    if requested == "auto":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if requested == "bf16" and not torch.cuda.is_bf16_supported():
        return "fp16"
    return requested


def apply(learn, precision: str):
    """Adds fastai's MixedPrecision callback (fp16 comes with its dynamic loss scaler)."""
    if precision == "bf16":
        return learn.to_bf16()
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
