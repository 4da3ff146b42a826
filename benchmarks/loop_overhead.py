"""Benchmark: the trainer's loop against the bare step, and where the time between steps goes.

    .venv/bin/python -m benchmarks.loop_overhead [--stages lm clf] [--sizes tiny local] [--batches 120]
        [--rounds 2] [--device cpu] [--bs 32] [--cpu-time] [--json-out FILE]

For each stage (lm: LM fine-tuning, the adaptive or full head as the env has it; clf: the classifier) and model
size (local: envs/local.yaml's AWD-LSTM; tiny: emb 32, hid 64, one layer, where a step takes a few ms so what
surrounds it shows; gpu: envs/base.yaml's 400/1152/3), on the same pre-made batches of seeded Zipf-shaped ids:

  bare   forward, loss (with ULMFiT's activation regularization, as the trainer's), backward and torch's AdamW
         step (foreach), in the run's precision: the step alone;
  loop   the trainer's own fit of one epoch (trainer.runtime.fitting with every callback of a run: epoch log,
         status.json, checkpoint timer, batch progress, heap trim, TensorBoard, best epoch), its training
         batches timed from the first few on (validation and the epoch's end are not in the per-batch figure).

Then a profiled pass of the loop splits the time outside the step by where it goes: data (the loader's batch
and its collation), events (fastai's dispatch and every callback, by class), the optimizer (step and
zero_grad, beyond the bare step's own), and counts **host syncs per training batch**: calls that make the
host wait for the device (Tensor.item, .tolist, .cpu, .numpy, bool/float/int of a tensor, a device-to-host
.to, torch.cuda.synchronize), each counted where it is called between a batch's start and its end. On a CPU
nothing waits, but each one is a stall on a GPU; on CUDA, torch's own sync debug mode counts them too.

Both are timed after an untimed epoch (whatever runs first pays for the allocator's pools and oneDNN's kernels for
each shape), alternately over --rounds, the fastest of each kept. Outside the step, two ways: loop - bare (what a run
pays, but the difference of two noisy times on a busy machine), and by the split (`outside_split_ms`: data, plus
events but the step's own callbacks, AR/TAR and autocast, plus the optimizer beyond the bare step's; it leaves out
fastai's own Python around the events), from passes that time the events as a whole (a timer around each callback
costs what the cheaper callbacks do), the fastest of --rounds; the per-callback figures from a pass of their own.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import platform
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SIZES = {
    "tiny": {"emb_sz": 32, "n_hid": 64, "n_layers": 1},
    "local": None,  # envs/local.yaml's
    "gpu": {"emb_sz": 400, "n_hid": 1152, "n_layers": 3, "lm_head": "full"},  # envs/base.yaml's
}
# callbacks that are the step's own (the bare step does the same): ULMFiT's AR/TAR on the loss, bf16 autocast; and
# the benchmark's clock
STEP_CALLBACKS = ("RNNRegularizer", "CpuAutocast", "ClockCallback")
WARM = 5  # the first batches (allocator, autotuning, first-call dispatch) are not timed
HOST_COPIES = ("tolist", "cpu", "numpy")
ON_DEVICE = "_loop_bench_on_device"  # marks the tensors that live on the training device in a GPU run


_clock = {"now": time.perf_counter}


def clock_s() -> float:
    """Wall time, or with --cpu-time this process's CPU time (one torch thread: what the loop itself costs,
    whatever else the machine runs)."""
    return _clock["now"]()


def subclasses(cls) -> list:
    found, todo = [], [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def from_to_device() -> bool:
    """Called from fastai's to_device (a batch moved to the training device)."""
    return any(f.name == "to_device" for f in traceback.extract_stack(limit=12))


def device_origin(prof):
    """A dispatch mode that follows which tensors would live on the device (parameters, batches and everything
    computed from them) and counts every scalar read of one (.item(), bool(), int(), float(), an index): on a
    GPU each makes the host wait for the device; on a CPU it costs nothing, which is why it is counted here."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    aten = torch.ops.aten
    scalar_reads = {aten._local_scalar_dense.default, aten.is_nonzero.default}
    # outputs whose shape depends on the values: the host waits to learn it
    sized_by_values = {aten.nonzero.default, aten.masked_select.default, aten._unique2.default}

    class DeviceOrigin(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            on_device = any(getattr(t, ON_DEVICE, False) for t in inputs)
            if on_device and func in scalar_reads:
                prof.count("scalar read (.item/bool/int)")
            elif on_device and (
                func in sized_by_values
                or (func is aten.index.Tensor and any(t.dtype == torch.bool for t in inputs[1:]))
            ):
                prof.count(f"{func.__name__} (its size read)")
            out = func(*args, **kwargs)
            if on_device:
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor):
                        setattr(t, ON_DEVICE, True)
            return out

    return DeviceOrigin()


def trainer_args(size: str, bs: int | None, device: str, extra: list[str]):
    """The local env's trainer arguments (envs/), at `size`."""
    from stacks.config import load_config
    from stacks.config.trainer_command import trainer_args as args_of
    from trainer.cli import build_parser

    pairs = [f"defaults.trainer.{k}={v}" for k, v in (SIZES[size] or {}).items()]
    if bs:
        pairs.append(f"defaults.trainer.bs={bs}")
    pairs += extra
    config = load_config(REPO / "envs", "local", pairs)
    argv = [*args_of(config, "fr"), "--run-id", time.strftime("%Y%m%d-%H%M%S-", time.gmtime()) + "0bch"]
    return build_parser().parse_args(argv)


def run_context(args, root: Path):
    """A real run's surroundings in a temporary file:// bucket: status.json, log.txt, checkpoints, TensorBoard."""
    from trainer.runfiles.status_file import RunStatus
    from trainer.runtime import distributed as D
    from trainer.runtime.context import RunContext
    from trainer.runtime.fitting import Fitter
    from trainer.runtime.preemption import Preemption
    from trainer.runtime.runlog import RunLog
    from trainer.storage import open_bucket

    args.bucket, args.work_dir = f"file://{root / 'bucket'}", str(root / "work")
    bucket = open_bucket(args.bucket)
    ctx = D.Context.from_env()
    log = RunLog(bucket, RunStatus(run_id=args.run_id, lang=args.lang, env=args.env, job=args.job))
    log.started()
    rc = RunContext.create(args, bucket, log, ctx, Preemption(ctx))
    return rc, Fitter(rc)


def zipf_tokens(n_docs: int, lengths: tuple[int, int], vocab: int, seed: int):
    """Documents of seeded Zipf-shaped ids (as a corpus's word counts): TokenIds."""
    from trainer.text.tokens import TokenIds

    rng = np.random.default_rng(seed)
    lens = rng.integers(lengths[0], lengths[1], n_docs)
    p = 1.0 / np.arange(1, vocab + 1)
    ids = rng.choice(vocab, size=int(lens.sum()), p=p / p.sum()).astype(np.int32)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return TokenIds([f"w{i}" for i in range(vocab)], ids, offsets)


def lm_setup(rc, fit, batches: int, vocab: int):
    """An LM fine-tuning learner (trainer.lm.train) over about `batches` training batches."""
    from trainer.lm.train import lm_learner

    a = rc.a
    n_tokens = int(batches * a.bs * a.seq_len / 0.9) + a.bs
    tokens = zipf_tokens(max(20, n_tokens // 150), (100, 200), vocab, a.seed)
    learn = fit.setup(lm_learner(rc, fit, tokens, valid_pct=0.1))
    phases = [(None, 1, a.lr_lm)]
    return learn, "lm_finetune", phases, {}


def clf_setup(rc, fit, batches: int, vocab: int):
    """The classifier's learner (trainer.stages.classifier) over `batches` training batches, 4 labels."""
    from trainer.stages.classifier import _learner
    from trainer.text.loaders import classifier_dataloaders

    a = rc.a
    n_train, n_valid = batches * a.bs, max(a.bs, batches * a.bs // 10)
    tokens = zipf_tokens(n_train + n_valid, (20, 160), vocab, a.seed)
    names = ["a", "b", "c", "d"]
    targets = [[names[i % 4]] for i in range(len(tokens))]
    rows = list(range(len(tokens)))
    dls = classifier_dataloaders(
        tokens,
        targets,
        multi_label=False,
        label_names=names,
        splits=(rows[:n_train], rows[n_train:]),
        bs=a.bs,
        seq_len=a.seq_len,
    )
    data = SimpleNamespace(multi_label=False, label_names=names, labels=targets)
    prep = SimpleNamespace(data=data, train_idx=rows[:n_train], valid_idx=rows[n_train:])
    learn = _learner(rc, fit, prep, dls)
    # all layers at the rates of the classifier's last phase (trainer.classification.recipe)
    phases = [(None, 1, slice(a.lr / 10 / 2.6**4, a.lr / 10))]
    return learn, "classifier", phases, {"metrics": "single", "keep_best": True}


SETUPS = {"lm": lm_setup, "clf": clf_setup}


def device_sync(device: str):
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


class Clock:
    """Times the training batches of one fit from batch WARM on (a sync at each end on CUDA)."""

    def __init__(self, device: str):
        from fastai.callback.core import Callback

        clock, sync = self, device_sync(device)
        self.started = self.ended = None
        self.n = 0

        class ClockCallback(Callback):
            order = -100

            def before_batch(self):
                if self.training and self.iter == WARM:
                    sync()
                    clock.started = clock_s()

            def after_train(self):
                sync()
                clock.ended = clock_s()
                clock.n = self.n_iter - WARM

        self.callback = ClockCallback()

    @property
    def ms_per_batch(self) -> float:
        return 1000 * (self.ended - self.started) / self.n


def bare_step(learn, batches: list, precision: str, device: str, lr: float) -> tuple[float, float]:
    """ms per batch of forward, loss, backward and a foreach AdamW step on `batches` (after WARM), and of the
    optimizer's step and zero_grad alone (the profile's optimizer figure is set against it)."""
    import torch

    from trainer.runtime import distributed as D

    model = D.unwrap(learn.model)
    reg = next((cb for cb in learn.cbs if type(cb).__name__ == "RNNRegularizer"), None)
    model.train()
    if hasattr(model, "reset"):
        model.reset()
    # fastai's Adam: decoupled weight decay 0.01, betas (0.9, 0.99), eps 1e-5
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), eps=1e-5, weight_decay=0.01)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    sync, started, in_optimizer = device_sync(device), None, 0.0
    for i, (xb, yb) in enumerate(batches):
        if i == WARM:
            sync()
            started, in_optimizer = clock_s(), 0.0
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(*xb)
            pred, raw, dropped = (o[-1] if isinstance(o, (list, tuple)) else o for o in out)  # fastai's RNNCallback
            loss = learn.loss_func(pred.float(), *yb)
            if reg is not None:  # ULMFiT's loss: activation and temporal activation regularization
                loss = loss + reg.alpha * dropped.float().pow(2).mean()
                loss = loss + reg.beta * (raw[:, 1:] - raw[:, :-1]).float().pow(2).mean()
        scaler.scale(loss).backward()
        t = clock_s()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        in_optimizer += clock_s() - t
    sync()
    n = len(batches) - WARM
    return 1000 * (clock_s() - started) / n, 1000 * in_optimizer / n


class Profile:
    """Where the loop's time goes and which calls sync the host, while installed (class-level wrappers)."""

    def __init__(self, device: str, *, count_syncs: bool, per_callback: bool = True):
        self.device, self.count_syncs, self.per_callback = device, count_syncs, per_callback
        self.in_batch = False
        self.syncs: collections.Counter = collections.Counter()
        self.seconds: collections.Counter = collections.Counter()
        self.batches = 0
        self._inside = 0
        self.in_step = False
        self._undo: list = []
        self._hooks: list = []
        self.mode = device_origin(self) if count_syncs else contextlib.nullcontext()

    def _wrap(self, owner, name: str, wrapper, inherited=None) -> None:
        own = name in owner.__dict__  # an inherited one is deleted again at the end, not set on the class
        original = owner.__dict__[name] if own else getattr(owner, name)
        setattr(owner, name, wrapper(inherited if inherited is not None and not own else original))
        self._undo.append((owner, name, original if own else None))

    def _timed(self, key: str):
        def wrapper(fn):
            def timed(*args, **kwargs):
                t = clock_s()
                try:
                    return fn(*args, **kwargs)
                finally:
                    if self.in_batch:
                        self.seconds[key] += clock_s() - t

            return timed

        return wrapper

    def _where(self) -> str:
        """The innermost callers outside torch and this module: the line that asked for the value."""
        frames = [
            f"{Path(f.filename).stem}.{f.name}"
            for f in reversed(traceback.extract_stack(limit=40)[:-2])
            if "loop_overhead" not in f.filename and "/torch/" not in f.filename
        ]
        return " < ".join(frames[:3]) or "?"

    def count(self, what: str) -> None:
        if self.in_batch and not self._inside:
            part = "step" if self.in_step else "loop"  # the model's forward and the loss are the step's own
            self.syncs[f"{part}: {what} in {self._where()}"] += 1

    def _counted(self, label: str, copies=lambda tensor, args, kwargs: True):
        """A Tensor method that copies a device tensor to the host when `copies` says so (.cpu, .tolist, .numpy,
        .to("cpu"); none of them dispatches on a CPU): counted, and the scalar reads inside it are not."""

        def wrapper(fn):
            def counted(tensor, *args, **kwargs):
                if getattr(tensor, ON_DEVICE, False) and copies(tensor, args, kwargs):
                    self.count(label)
                self._inside += 1
                try:
                    return fn(tensor, *args, **kwargs)
                finally:
                    self._inside -= 1

            return counted

        return wrapper

    def install(self, learn) -> None:
        import torch
        from fastai.callback.core import Callback
        from fastai.learner import Learner
        from fastai.optimizer import _BaseOptimizer

        for name in HOST_COPIES:
            self._wrap(torch.Tensor, name, self._counted(f"Tensor.{name}"))

        def to_host(tensor, args, kwargs) -> bool:
            target = args[0] if args else kwargs.get("device")
            # fastai's to_device moves a batch to the training device (the CPU, here): not a copy to the host
            return str(target).startswith("cpu") and not from_to_device()

        self._wrap(torch.Tensor, "to", self._counted("Tensor.to(cpu)", to_host))
        for p in learn.model.parameters():
            setattr(p, ON_DEVICE, True)
        self._hooks = [
            learn.model.register_forward_pre_hook(lambda *_: setattr(self, "in_step", True)),
            learn.model.register_forward_hook(lambda *_: setattr(self, "in_step", False)),
        ]
        loss_func = learn.loss_func

        def loss_in_step(*args, **kwargs):
            self.in_step = True
            try:
                return loss_func(*args, **kwargs)
            finally:
                self.in_step = False

        self._learn, self._loss_func = learn, loss_func
        learn.loss_func = loss_in_step
        prof = self

        def one_batch(fn):
            def timed(learner, *args, **kwargs):
                # the batches the clock times (from WARM on): the same window for every figure
                if not learner.training or (args and isinstance(args[0], int) and args[0] < WARM):
                    return fn(learner, *args, **kwargs)
                for t in args[1] if len(args) > 1 else ():
                    if isinstance(t, torch.Tensor):
                        setattr(t, ON_DEVICE, True)
                prof.in_batch, t = True, clock_s()
                try:
                    return fn(learner, *args, **kwargs)
                finally:
                    prof.in_batch = False
                    prof.seconds["one_batch"] += clock_s() - t
                    prof.batches += 1

            return timed

        self._wrap(Learner, "one_batch", one_batch)
        self._wrap(Learner, "_call_one", self._timed("events"))
        dispatch = getattr(learn, "_call_one", None)
        if "_call_one" in vars(learn):  # the trainer's own dispatch (trainer.runtime.loop)
            self._wrap(type(dispatch), "__call__", self._timed("events"))
        # each class's __call__ as it was (a subclass's is not its wrapped parent's, or a call counted twice); without
        # per_callback only the step's own are timed (the rest keep the dispatch's direct call: no timers' cost)
        plain = {
            cls: cls.__call__
            for cls in subclasses(Callback)
            if "__call__" not in cls.__dict__ and (self.per_callback or cls.__name__ in STEP_CALLBACKS)
        }
        for cls, original in plain.items():
            self._wrap(cls, "__call__", self._timed(f"callback {cls.__name__}"), original)
        for cls in subclasses(_BaseOptimizer):
            for name in ("step", "zero_grad"):
                if name in cls.__dict__:
                    self._wrap(cls, name, self._timed(f"optimizer {name}"))

        if self.device == "cuda" and self.count_syncs:
            torch.cuda.set_sync_debug_mode("warn")
        self.mode.__enter__()

    def uninstall(self) -> None:
        import torch

        self.mode.__exit__(None, None, None)
        for hook in self._hooks:
            hook.remove()
        if self._hooks:
            self._learn.loss_func = self._loss_func
        for owner, name, original in reversed(self._undo):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        if self.device == "cuda" and self.count_syncs:
            torch.cuda.set_sync_debug_mode("default")


def profiled_fit(
    learn, fit, state, stage: str, phases, fit_kwargs, device: str, *, count_syncs: bool, per_callback: bool = True
):
    """One more epoch from the same weights under a Profile: (the profile, with its clock; warnings caught)."""
    learn.model.load_state_dict(state)
    fit.carry.pop(f"{stage}_best", None)
    prof = Profile(device, count_syncs=count_syncs, per_callback=per_callback)
    prof.clock = Clock(device)
    prof.install(learn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fit_once(learn, fit, stage, phases, fit_kwargs, [prof.clock.callback])
        finally:
            prof.uninstall()
    return prof, caught


def fit_once(learn, fit, stage: str, phases: list, fit_kwargs: dict, extra_cbs: list):
    learn.add_cbs(extra_cbs)
    try:
        fit.fit_phases(learn, stage, phases, **fit_kwargs)
    finally:
        learn.remove_cbs(extra_cbs)


def count_syncs(stage: str, size: str = "tiny", *, batches: int = 16, extra_cbs: tuple = ()) -> dict:
    """The counting pass alone, on the CPU (the suite's check): {"loop": syncs per training batch outside the
    step, "step": inside the model's forward and loss, "calls": where each was asked for}."""
    with tempfile.TemporaryDirectory(prefix="loop-syncs-") as tmp:
        args = trainer_args(size, None, "cpu", [])
        rc, fit = run_context(args, Path(tmp))
        learn, stage_name, phases, fit_kwargs = SETUPS[stage](rc, fit, batches, 2000)
        learn.add_cbs(list(extra_cbs))
        state = {k: v.detach().clone() for k, v in learn.model.state_dict().items()}
        prof, _ = profiled_fit(learn, fit, state, stage_name, phases, fit_kwargs, "cpu", count_syncs=True)
        rc.log.close(seal=True)
        if fit.board is not None:
            fit.board.close()
    n = max(prof.batches, 1)
    return {
        "loop": sum(v for k, v in prof.syncs.items() if k.startswith("loop")) / n,
        "step": sum(v for k, v in prof.syncs.items() if k.startswith("step")) / n,
        "calls": dict(prof.syncs),
        "batches": prof.batches,
    }


def measure(
    stage: str, size: str, *, batches: int, vocab: int, bs: int | None, device: str, extra: list[str], rounds: int = 2
) -> dict:
    """One stage at one size: bare step, the loop (`rounds` of each, alternating), and the profiled loop's split
    and syncs."""
    import torch

    from trainer.runtime.context import RunContext  # noqa: F401  (imported before fastai patches Tensor)

    with tempfile.TemporaryDirectory(prefix="loop-bench-") as tmp:
        args = trainer_args(size, bs, device, extra)
        rc, fit = run_context(args, Path(tmp))
        learn, stage_name, phases, fit_kwargs = SETUPS[stage](rc, fit, batches, vocab)
        row = {
            "stage": stage_name,
            "size": size,
            "arch": "/".join(str(fit.arch[k]) for k in ("emb_sz", "n_hid", "n_layers")),
            "bs": args.bs,
            "precision": rc.precision,
            "head": fit.lm_head if stage == "lm" else "linear",
            "threads": torch.get_num_threads(),
        }
        # the same batches for the bare step: the loader's own, once, on the device
        made = []
        for b in learn.dls.train:
            n_in = len(b) - 1
            made.append((tuple(b[:n_in]), tuple(b[n_in:])))
        row["batches"] = len(made)
        if len(made) <= WARM + 2:
            raise ValueError(f"{len(made)} batches: too few to time")
        state = {k: v.detach().clone() for k, v in learn.model.state_dict().items()}
        lr = phases[0][2].stop if isinstance(phases[0][2], slice) else phases[0][2]

        # an untimed epoch first (the allocator's pools, oneDNN's kernels for each shape: whatever ran first paid for
        # them), then the loop and the bare step alternately, each figure the fastest of its rounds
        fit_once(learn, fit, stage_name, phases, fit_kwargs, [])
        loops, bares = [], []
        for _ in range(rounds):
            learn.model.load_state_dict(state)
            fit.carry.pop(f"{stage_name}_best", None)
            clock = Clock(device)
            fit_once(learn, fit, stage_name, phases, fit_kwargs, [clock.callback])
            loops.append(round(clock.ms_per_batch, 3))
            learn.model.load_state_dict(state)
            bares.append(tuple(round(v, 3) for v in bare_step(learn, made, rc.precision, device, lr)))
        row["loop_ms_rounds"], row["bare_ms_rounds"] = loops, [b[0] for b in bares]
        row["loop_ms"] = min(loops)
        row["bare_ms"], row["bare_optimizer_ms"] = min(bares)
        row["outside_ms"] = round(row["loop_ms"] - row["bare_ms"], 3)
        row["loop_over_bare"] = round(row["bare_ms"] / row["loop_ms"], 3)
        tokens = made[0][0][0].numel()
        row["tokens_per_batch"] = tokens
        row["loop_tokens_per_s"] = round(tokens / row["loop_ms"] * 1000)
        row["bare_tokens_per_s"] = round(tokens / row["bare_ms"] * 1000)

        prof, caught = profiled_fit(learn, fit, state, stage_name, phases, fit_kwargs, device, count_syncs=False)
        n = max(prof.batches, 1)
        per = {k: round(1000 * v / n, 3) for k, v in prof.seconds.items()}
        callbacks = {k.removeprefix("callback "): v for k, v in per.items() if k.startswith("callback ")}
        events = per.get("events", 0.0)
        row["profile_ms_per_batch"] = {
            "one_batch": per.get("one_batch", 0.0),
            "events (dispatch + callbacks)": events,
            "dispatch alone": round(events - sum(callbacks.values()), 3),
            "optimizer step": per.get("optimizer step", 0.0),
            "optimizer zero_grad": per.get("optimizer zero_grad", 0.0),
            "callbacks": dict(sorted(callbacks.items(), key=lambda kv: -kv[1])),
        }
        row["profiled_loop_ms"] = round(prof.clock.ms_per_batch, 3)
        # what the loop adds to the step, by the split (steadier than loop - bare on a busy machine), from passes that
        # time only the events as a whole and the step's own callbacks (a timer around every callback costs what the
        # cheaper ones do): the data (between the end of one training batch and the start of the next: the loader's
        # batch), the events but the step's own (the loss's AR/TAR, autocast) and this benchmark's clock, and the
        # optimizer beyond the bare step's; the fastest of `rounds` passes
        splits = []
        for _ in range(rounds):
            light, _ = profiled_fit(
                learn, fit, state, stage_name, phases, fit_kwargs, device, count_syncs=False, per_callback=False
            )
            n = max(light.batches, 1)
            per = {k: 1000 * v / n for k, v in light.seconds.items()}
            data = light.clock.ms_per_batch - per.get("one_batch", 0.0)
            events = per.get("events", 0.0)
            own = sum(per.get(f"callback {name}", 0.0) for name in STEP_CALLBACKS)
            optimizer = per.get("optimizer step", 0.0) + per.get("optimizer zero_grad", 0.0)
            outside = data + events - own + max(optimizer - row["bare_optimizer_ms"], 0.0)
            splits.append({"outside": outside, "data": data, "events": events - own})
        best = min(splits, key=lambda split: split["outside"])
        row["data_ms"] = round(best["data"], 3)
        row["outside_events_ms"] = round(best["events"], 3)
        row["outside_split_ms"] = round(best["outside"], 3)
        row["outside_split_rounds"] = [round(split["outside"], 3) for split in splits]
        prof, caught = profiled_fit(learn, fit, state, stage_name, phases, fit_kwargs, device, count_syncs=True)
        n = max(prof.batches, 1)
        row["syncs_per_batch"] = round(sum(v for k, v in prof.syncs.items() if k.startswith("loop")) / n, 3)
        row["step_syncs_per_batch"] = round(sum(v for k, v in prof.syncs.items() if k.startswith("step")) / n, 3)
        row["sync_calls"] = {k: round(v / n, 3) for k, v in prof.syncs.most_common()}
        if device == "cuda":
            torch_syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
            row["cuda_sync_warnings_per_batch"] = round(len(torch_syncs) / n, 3)
            row["cuda_sync_examples"] = sorted({f"{Path(w.filename).name}:{w.lineno}" for w in torch_syncs})[:12]
        rc.log.close(seal=True)
        if fit.board is not None:
            fit.board.close()
        return row


def table(rows: list[dict]) -> str:
    lines = [
        "| stage | size (emb/hid/layers) | bs | precision | bare ms | loop ms | outside ms | loop/bare | "
        "data ms | events ms (not the step's) | outside by split ms | loop syncs/batch | step syncs/batch |",
        "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['stage']} | {r['size']} | | | {r['error'][:80]} |")
            continue
        lines.append(
            f"| {r['stage']} | {r['size']} {r['arch']} | {r['bs']} | {r['precision']} | {r['bare_ms']:.2f} | "
            f"{r['loop_ms']:.2f} | {r['outside_ms']:.2f} | {100 * r['loop_over_bare']:.0f} % | "
            f"{r['data_ms']:.2f} | {r['outside_events_ms']:.2f} | "
            f"{r['outside_split_ms']:.2f} | {r['syncs_per_batch']:g} | {r['step_syncs_per_batch']:g} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", nargs="+", default=["lm", "clf"], choices=list(SETUPS))
    parser.add_argument("--sizes", nargs="+", default=["tiny", "local"], choices=list(SIZES))
    parser.add_argument("--batches", type=int, default=120, help="training batches per timed epoch")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=2, help="loop and bare step timed alternately, the fastest kept")
    parser.add_argument("--bs", type=int, nargs="+", default=[0], help="batch sizes (0: the env's)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more config settings")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time by this process's CPU time, one torch thread (a busy machine's figures; CPU only)",
    )
    args = parser.parse_args(argv)
    import torch

    if args.cpu_time:
        torch.set_num_threads(1)
        _clock["now"] = time.process_time

    print(
        f"# {platform.machine()} {platform.processor() or ''}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, device {args.device}",
        flush=True,
    )
    rows = []
    for size in args.sizes:
        for stage in args.stages:
            for bs in args.bs:
                try:
                    row = measure(
                        stage,
                        size,
                        batches=args.batches,
                        vocab=args.vocab,
                        bs=bs,
                        device=args.device,
                        extra=args.set,
                        rounds=args.rounds,
                    )
                except Exception as exc:  # one row that says why, the others still measured
                    traceback.print_exc()
                    row = {"stage": stage, "size": size, "bs": bs, "error": f"{type(exc).__name__}: {exc}"}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json_out:
                    args.json_out.write_text(json.dumps(rows, indent=2))
    print(table(rows))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
