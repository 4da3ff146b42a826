"""The training loop at the speed of its step: what fastai does around each batch, without host syncs and with
as little Python as the step allows (measured by benchmarks/loop_overhead.py, docs/BENCHMARKS.md "Loop").

- Losses and metrics accumulate on the device and are read once, at the epoch's end (fastai's Recorder copies
  every batch's loss to the host: on a GPU, a wait for the whole step).
- fastai's Adam, stepped with torch's foreach kernels: the same state, hyper-parameters and arithmetic as
  fastai's per-parameter callbacks (a checkpoint's optimizer state loads either way), a few kernel launches
  per parameter group instead of a dozen Python calls per parameter.
- Each event goes only to the callbacks that handle it, in the order fastai sorts them, sorted once per set of
  callbacks instead of at every event (trainer/runtime/dispatch.py); fastai's callbacks that run every batch read the
  learner's attributes directly (trainer/runtime/lean.py).
- The classifier's encoder runs each chunk on the rows the loader counted on the host (fastai's SentenceEncoder
  counts them on the device and reads the count: a sync per chunk); the same rows, so the same outputs.
- The one-cycle schedule's values computed on Python floats (fastai computes each batch's with tensor operations):
  the same float32 arithmetic, so every batch trains with the same rates and momentums, bit for bit.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from fastai.callback.core import Callback
from fastai.callback.schedule import ParamScheduler, SchedCos
from fastai.learner import AvgLoss, AvgMetric, AvgSmoothLoss, Learner, Recorder
from fastai.metrics import AccumMetric, Perplexity
from fastai.optimizer import Adam, Optimizer, adam_step, average_grad, average_sqr_grad, debias, step_stat, weight_decay
from fastai.text.models.core import SentenceEncoder, _pad_tensor
from fastai.torch_core import TensorBase, find_bs, flatten_check, tensor
from fastcore.foundation import L

from trainer.runtime.dispatch import EventDispatch
from trainer.runtime.lean import call_events, lean_callbacks
from trainer.text.batches import CHUNK_ROWS

# --- losses and metrics on the device ------------------------------------------------------------------------


class DeviceRecorder(Recorder):
    """fastai's Recorder, a training batch recorded without rebuilding fastai's list of metrics and with the
    smoothed loss divided once (fastai builds two lists and divides twice a batch): the same records."""

    @property
    def name(self) -> str:
        return "recorder"  # learn.recorder, as fastai names it

    def after_batch(self):
        learn = self.learn
        if not learn.training or self.train_metrics or getattr(self, "cancel_train", False):
            return super().after_batch()
        if len(learn.yb) == 0:
            return
        self.smooth_loss.accumulate(learn)
        self.lrs.append(learn.opt.hypers[-1]["lr"])
        value = self.smooth_loss.value
        self.losses.append(value)
        learn.smooth_loss = value


def _on_device(value) -> torch.Tensor:
    return value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(value)


class DeviceSmoothLoss(AvgSmoothLoss):
    """fastai's smoothed training loss, kept where the loss is (its value is read at the epoch's end)."""

    def accumulate(self, learn):
        loss = learn.loss.detach()
        if loss.dim():  # fastai's mean; a scalar's is itself
            loss = loss.mean()
        if self.count == 0:
            self.val = torch.zeros_like(loss)
        self.count += 1
        self.val = torch.lerp(loss, self.val, self.beta)


class DeviceAvgLoss(AvgLoss):
    """The validation loss summed on the device."""

    def accumulate(self, learn):
        bs = find_bs(learn.yb)
        self.total = self.total + learn.loss.detach().mean() * bs
        self.count += bs


class DevicePerplexity(Perplexity):
    def accumulate(self, learn):
        DeviceAvgLoss.accumulate(self, learn)


class DeviceAvgMetric(AvgMetric):
    """A per-batch metric (accuracy) averaged on the device."""

    def accumulate(self, learn):
        bs = find_bs(learn.yb)
        self.total = self.total + _on_device(self.func(learn.pred, *learn.yb)) * bs
        self.count += bs


class DeviceAccumMetric(AccumMetric):
    """A metric over the whole epoch (macro-F1): predictions kept on the device, copied to the host once."""

    def accum_values(self, preds, targs, learn=None):
        preds, targs = preds.detach(), targs.detach()
        if self.flatten:
            preds, targs = flatten_check(preds, targs)
        self.preds.append(preds)
        self.targs.append(targs)

    @property
    def value(self):
        if len(self.preds) == 0:
            return None
        preds, targs = torch.cat(self.preds).cpu(), torch.cat(self.targs).cpu()
        if self.to_np:
            preds, targs = preds.numpy(), targs.numpy()
        return self.func(targs, preds, **self.kwargs) if self.invert_args else self.func(preds, targs, **self.kwargs)


def _device_metric(metric):
    if type(metric) is Perplexity:
        return DevicePerplexity()
    if type(metric) is AvgMetric:
        return DeviceAvgMetric(metric.func)
    if type(metric) is AccumMetric:
        moved = DeviceAccumMetric.__new__(DeviceAccumMetric)
        moved.__dict__.update(metric.__dict__)
        return moved
    return metric


def device_metrics(learn) -> None:
    """Losses and metrics accumulated on the device (the values fastai would compute, read at the epoch's end)."""
    recorder = next((cb for cb in learn.cbs if isinstance(cb, Recorder)), None)
    if recorder is None:
        return
    if type(recorder) is Recorder:
        object.__setattr__(recorder, "__class__", DeviceRecorder)  # a Callback's own setattr warns of learn's
    recorder.smooth_loss = DeviceSmoothLoss(beta=recorder.smooth_loss.beta)
    recorder.loss = DeviceAvgLoss()
    learn.metrics = [_device_metric(m) for m in learn.metrics]


class PlainLoss(Callback):
    """The batch's loss as a plain tensor (the same one, `as_subclass`): fastai's losses return a TensorBase, whose
    every operation (the regularization added to it, backward, the smoothed loss) goes through Python's
    `__torch_function__`, tens of microseconds each."""

    order = -50  # before anything reads the loss or adds to it

    def after_loss(self):
        learn = self.learn
        if isinstance(getattr(learn, "loss_grad", None), TensorBase):
            learn.loss_grad = learn.loss_grad.as_subclass(torch.Tensor)
        if isinstance(getattr(learn, "loss", None), TensorBase):
            learn.loss = learn.loss.as_subclass(torch.Tensor)


# --- fastai's Adam with foreach kernels ----------------------------------------------------------------------


class ForeachAdam(Optimizer):
    """fastai's `Adam` (decoupled weight decay, dampened averages, debiased step): its callbacks, state
    (grad_avg, sqr_avg, step, do_wd per parameter) and hyper-parameters, so schedules, freezing and checkpoints
    are fastai's; `step` and `zero_grad` run torch's foreach kernels over each parameter group, in the order and
    with the arithmetic of fastai's callbacks."""

    def step(self, closure=None):
        if closure is not None:
            raise NotImplementedError("fastai optimizers do not take a closure")
        with torch.no_grad():
            for params, hyper in zip(self.param_lists, self.hypers):
                batches: dict[tuple[int, bool], list] = {}
                for p in params:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if "grad_avg" not in state:
                        state["grad_avg"] = torch.zeros_like(p.grad)
                        state["sqr_avg"] = torch.zeros_like(p.grad)
                    state["step"] = state.get("step", 0) + 1
                    batches.setdefault((state["step"], state.get("do_wd", True)), []).append((p, state))
                for (step, do_wd), items in batches.items():
                    self._adam(items, step, do_wd, **hyper)

    @staticmethod
    def _adam(items, step: int, do_wd: bool, *, lr, mom, sqr_mom, eps, wd, **_):
        ps = [p for p, _ in items]
        grads = [p.grad for p in ps]
        grad_avgs = [s["grad_avg"] for _, s in items]
        sqr_avgs = [s["sqr_avg"] for _, s in items]
        if do_wd and wd != 0:  # weight_decay
            torch._foreach_mul_(ps, 1 - lr * wd)
        torch._foreach_mul_(grad_avgs, mom)  # average_grad(dampening=True)
        torch._foreach_add_(grad_avgs, grads, alpha=1 - mom)
        torch._foreach_mul_(sqr_avgs, sqr_mom)  # average_sqr_grad
        torch._foreach_addcmul_(sqr_avgs, grads, grads, value=1 - sqr_mom)
        debias1, debias2 = debias(mom, 1 - mom, step), debias(sqr_mom, 1 - sqr_mom, step)  # adam_step
        denom = torch._foreach_div(sqr_avgs, debias2)
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(ps, grad_avgs, denom, value=-lr / debias1)

    def zero_grad(self):
        grads = [p.grad for params in self.param_lists for p in params if p.grad is not None]
        for g in grads:
            g.detach_()
        if grads:
            torch._foreach_zero_(grads)


def foreach_adam(params, lr, mom=0.9, sqr_mom=0.99, eps=1e-5, wd=0.01):
    """fastai.optimizer.Adam's signature and defaults (decoupled weight decay), as a ForeachAdam."""
    cbs = [weight_decay, partial(average_grad, dampening=True), average_sqr_grad, step_stat, adam_step]
    return ForeachAdam(params, cbs, lr=lr, mom=mom, sqr_mom=sqr_mom, eps=eps, wd=wd)


# --- the classifier's encoder without a sync per chunk -------------------------------------------------------


class HostRowsEncoder(SentenceEncoder):
    """fastai's SentenceEncoder, each chunk's row count read from the batch's `chunk_rows` (counted on the host by
    the loader, fastai metadata that follows the batch to the device) instead of counted on the device and read back
    (`input[:real_bs]`: the host waits for the device at every chunk). The same rows, so the same outputs; an input
    without the counts (serving, another loader) is read as fastai reads it."""

    def forward(self, input):
        rows = getattr(input, CHUNK_ROWS, None)
        bs, sl = input.size()
        starts = range(0, sl, self.bptt)
        if rows is None or len(rows) != len(starts):
            return super().forward(input)
        self.reset()
        mask = input == self.pad_idx
        outs, masks = [], []
        for i, real_bs in zip(starts, rows):
            o = self.module(input[:real_bs, i : min(i + self.bptt, sl)])
            if self.max_len is None or sl - i <= self.max_len:
                outs.append(o)
                masks.append(mask[:, i : min(i + self.bptt, sl)])
        outs = torch.cat([_pad_tensor(o, bs) for o in outs], dim=1)
        mask = torch.cat(masks, dim=1)
        return outs, mask


def host_rows_encoder(model) -> None:
    """A classifier's SentenceEncoder (the model's first part) as a HostRowsEncoder, its module and weights kept."""
    try:
        encoder = model[0]
    except (TypeError, IndexError, NotImplementedError):
        return
    if type(encoder) is SentenceEncoder:
        model[0] = HostRowsEncoder(encoder.bptt, encoder.module, pad_idx=encoder.pad_idx, max_len=encoder.max_len)


# --- the one-cycle schedule on Python floats ----------------------------------------------------------------


class CombinedSchedule:
    """fastai's `combine_scheds(pcts, scheds)` without tensors: fastai keeps the phases' bounds in a float32 tensor
    and finds a batch's phase and its position in it with tensor operations (a dozen small ops a batch, each a
    dispatch); the same float32 values and arithmetic here on numpy scalars give the same position to the bit."""

    def __init__(self, pcts, scheds):
        assert sum(pcts) == 1.0
        bounds = tensor([0] + L(pcts))  # fastai's: float32
        assert torch.all(bounds >= 0)
        self.bounds = [np.float32(b) for b in torch.cumsum(bounds, 0).tolist()]
        self.last = len(self.bounds) - 2
        self.scheds = scheds

    def __call__(self, pos: float):
        p = np.float32(pos)  # torch compares and subtracts a Python float in the tensor's dtype
        idx = min(max(i for i, bound in enumerate(self.bounds) if p >= bound), self.last)
        actual = (p - self.bounds[idx]) / (self.bounds[idx + 1] - self.bounds[idx])
        return self.scheds[idx](float(actual))


def combined_cos(pct, start, middle, end) -> CombinedSchedule:
    """fastai's combined_cos: cosine annealing from `start` to `middle` over `pct` of training, then to `end`."""
    return CombinedSchedule([pct, 1 - pct], [SchedCos(start, middle), SchedCos(middle, end)])


class FloatParamScheduler(ParamScheduler):
    """fastai's ParamScheduler, each batch's values set in the optimizer's hyper-parameters as fastai's `set_hyper`
    sets them (an array: one value a group; a number: the same for every group), without building its lists."""

    @property
    def name(self) -> str:
        return "param_scheduler"

    def before_batch(self):
        self._update_val(self.learn.pct_train)

    def after_batch(self):
        last = self.learn.opt.hypers[-1]
        for name, values in self.hps.items():
            values.append(last[name])

    def _update_val(self, pct):
        opt = self.learn.opt
        for name, sched in self.scheds.items():
            value = sched(pct)
            if isinstance(value, np.ndarray) and value.ndim == 1 and len(value) == len(opt.hypers):
                values = list(value)
            elif isinstance(value, (float, int)):
                values = [value] * len(opt.hypers)
            else:
                opt.set_hyper(name, value)
                continue
            for hyper, v in zip(opt.hypers, values):
                hyper[name] = v


def fit_one_cycle(
    learn,
    n_epoch,
    lr_max=None,
    div=25.0,
    div_final=1e5,
    pct_start=0.25,
    wd=None,
    moms=None,
    cbs=None,
    reset_opt=False,
    start_epoch=0,
):
    """fastai's `Learner.fit_one_cycle`, its schedule computed by CombinedSchedule and set by FloatParamScheduler:
    the same values each batch."""
    if learn.opt is None:
        learn.create_opt()
    learn.opt.set_hyper("lr", learn.lr if lr_max is None else lr_max)
    lr_max = np.array([h["lr"] for h in learn.opt.hypers])
    scheds = {
        "lr": combined_cos(pct_start, lr_max / div, lr_max, lr_max / div_final),
        "mom": combined_cos(pct_start, *(learn.moms if moms is None else moms)),
    }
    learn.fit(n_epoch, cbs=FloatParamScheduler(scheds) + L(cbs), reset_opt=reset_opt, wd=wd, start_epoch=start_epoch)


def apply(learn):
    """Everything above on `learn`: fastai's Adam (every learner of the trainer's) becomes ForeachAdam, another
    optimizer is left as it is."""
    if getattr(learn, "opt_func", None) is Adam:
        learn.opt_func = foreach_adam
        if learn.opt is not None:
            learn.create_opt()
    device_metrics(learn)
    lean_callbacks(learn)
    learn.add_cb(PlainLoss())
    host_rows_encoder(getattr(learn, "model", None))
    learn._call_one = EventDispatch(learn)
    Learner.__call__ = call_events  # every learner of the process: the same calls, in the same order
    return learn
