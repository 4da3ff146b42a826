"""trainer.runtime.precision: which precision a run uses on a CPU, and bf16 autocast around CPU batches."""

from __future__ import annotations

import pytest
import torch

from trainer.runtime import precision as P

fastai_learner = pytest.importorskip("fastai.learner")

FLAGS = "processor\t: 0\nflags\t\t: fpu sse avx2 {extra}\nbugs\t\t: spectre\n"


@pytest.mark.parametrize(
    "extra, found", [("avx512f avx512_bf16", "avx512_bf16"), ("amx_bf16 amx_tile", "amx_bf16"), ("avx512f", None)]
)
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, extra, found):
    info = tmp_path / "cpuinfo"
    info.write_text(FLAGS.format(extra=extra))
    assert P.cpu_bf16(info) == found
    assert P.cpu_bf16(tmp_path / "absent") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU rules; a GPU machine follows the card's")
@pytest.mark.parametrize(
    "flag, requested, resolved",
    [
        ("amx_bf16", "auto", "bf16"),
        ("amx_bf16", "bf16", "bf16"),
        ("amx_bf16", "fp32", "fp32"),
        (None, "auto", "fp32"),
        (None, "bf16", "fp32"),
        (None, "fp16", "fp32"),
        ("avx512_bf16", "fp16", "fp32"),
    ],
)
def test_a_cpu_runs_bf16_only_where_it_has_it(monkeypatch, flag, requested, resolved):
    monkeypatch.setattr(P, "cpu_bf16", lambda: flag)
    assert P.resolve(requested) == resolved
    line = P.describe(requested, resolved)
    assert line.startswith(f"precision: {resolved}") and f"trainer.precision {requested}" in line
    if resolved == "bf16":
        assert flag in line
    elif requested == "fp16":
        assert "no fp16 path on CPU" in line
    else:
        assert ("no avx512_bf16" in line) == (requested != "fp32")


@pytest.mark.skipif(torch.cuda.is_available(), reason="apply() gives a GPU machine fastai's CUDA MixedPrecision")
def test_cpu_autocast_runs_the_forward_pass_in_bf16_and_leaves_nothing_enabled():
    from fastai.callback.core import Callback
    from fastai.data.core import DataLoaders
    from fastai.data.load import DataLoader
    from fastai.learner import Learner

    seen = []

    class Dtypes(Callback):
        order = 9  # before CpuAutocast.after_pred turns the prediction to fp32

        def after_pred(self):
            seen.append((self.training, self.pred.dtype, torch.is_autocast_enabled("cpu")))

    x = torch.randn(32, 4)
    items = list(zip(x, x.sum(dim=1, keepdim=True)))
    dls = DataLoaders(DataLoader(items, bs=8), DataLoader(items, bs=8))
    learn = Learner(dls, torch.nn.Linear(4, 1), loss_func=torch.nn.MSELoss(), cbs=[Dtypes()])
    learn.remove_cbs([cb for cb in learn.cbs if type(cb).__name__ == "ProgressCallback"])
    P.apply(learn, "bf16")
    learn.fit(1, 1e-2)
    assert seen and all(dtype == torch.bfloat16 and on for _, dtype, on in seen)
    assert {training for training, _, _ in seen} == {True, False}  # validation too
    assert not torch.is_autocast_enabled("cpu")
    assert learn.model.weight.dtype == torch.float32  # weights and optimizer state stay fp32
