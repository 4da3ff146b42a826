"""The training loop at the speed of its step: what fastai does around each batch, without host syncs and with
as little Python as the step allows (measured by benchmarks/loop_overhead.py, docs/BENCHMARKS.md "Loop").

- Losses and metrics accumulate on the device and are read once, at the epoch's end (fastai's Recorder copies
  every batch's loss to the host: on a GPU, a wait for the whole step).
- fastai's Adam, stepped with torch's foreach kernels: the same state, hyper-parameters and arithmetic as
  fastai's per-parameter callbacks (a checkpoint's optimizer state loads either way), a few kernel launches
  per parameter group instead of a dozen Python calls per parameter.
- Each event goes only to the callbacks that handle it, in the order fastai sorts them, sorted once per set of
  callbacks instead of at every event.
"""

from __future__ import annotations

from functools import partial
from operator import attrgetter

import torch
from fastai.callback.core import event
from fastai.learner import AvgLoss, AvgMetric, AvgSmoothLoss, Recorder
from fastai.metrics import AccumMetric, Perplexity
from fastai.optimizer import Adam, Optimizer, adam_step, average_grad, average_sqr_grad, debias, step_stat, weight_decay
from fastai.torch_core import find_bs, flatten_check

# --- losses and metrics on the device ------------------------------------------------------------------------


def _on_device(value) -> torch.Tensor:
    return value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(value)


class DeviceSmoothLoss(AvgSmoothLoss):
    """fastai's smoothed training loss, kept where the loss is (its value is read at the epoch's end)."""

    def accumulate(self, learn):
        loss = learn.loss.detach().mean()
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
    recorder.smooth_loss = DeviceSmoothLoss(beta=recorder.smooth_loss.beta)
    recorder.loss = DeviceAvgLoss()
    learn.metrics = [_device_metric(m) for m in learn.metrics]


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


# --- event dispatch ----------------------------------------------------------------------------------------------


class EventDispatch:
    """A learner's `_call_one`: each event to the callbacks that define it, sorted by `order` as fastai does
    (a stable sort), once per set of callbacks. `after_fit` still reaches every callback (fastai resets each
    one's `run` there)."""

    def __init__(self, learn):
        self.learn = learn
        self.key: tuple = ()
        self.by_event: dict[str, list] = {}

    def __getstate__(self):
        return {"learn": self.learn, "key": (), "by_event": {}}

    def __call__(self, event_name: str) -> None:
        cbs = self.learn.cbs
        key = tuple(map(id, cbs))
        if key != self.key:
            self.key, self.by_event = key, {}
        todo = self.by_event.get(event_name)
        if todo is None:
            if not hasattr(event, event_name):
                raise Exception(f"missing {event_name}")
            ordered = sorted(cbs, key=attrgetter("order"))
            todo = [
                cb
                for cb in ordered
                if event_name == "after_fit"
                or event_name in cb.__dict__
                or callable(getattr(type(cb), event_name, None))
            ]
            self.by_event[event_name] = todo
        for cb in todo:
            cb(event_name)


def apply(learn):
    """Everything above on `learn`: fastai's Adam (every learner of the trainer's) becomes ForeachAdam, another
    optimizer is left as it is."""
    if getattr(learn, "opt_func", None) is Adam:
        learn.opt_func = foreach_adam
        if learn.opt is not None:
            learn.create_opt()
    device_metrics(learn)
    learn._call_one = EventDispatch(learn)
    return learn
