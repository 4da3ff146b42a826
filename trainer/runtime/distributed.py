"""Ranks, barriers and rank-0 writes for runs under torchrun (one process per GPU, `nodes` VMs).

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; without them the
trainer is one process and every helper here is a no-op. NCCL on GPU, gloo on CPU (the
`local` target's `processes: N`). Only rank 0 writes to the bucket; the other ranks train
their shard of the data and wait for rank 0 where it works alone (tokenization, evaluation,
upload).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from fastai.callback.core import Callback, CancelValidException
from fastai.torch_core import to_detach
from torch.nn.parallel import DistributedDataParallel

# Ranks > 0 wait at a barrier while rank 0 tokenizes a corpus or evaluates: give it hours,
# not the default 10-30 minutes. A peer that dies is noticed at once (connection closed).
PG_TIMEOUT = timedelta(hours=4)


class PeerLost(Exception):
    """Another rank stopped (killed, preempted) in the middle of a collective: nothing to save here."""


@dataclass(frozen=True)
class Context:
    """This process's place in the run."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")

    @classmethod
    def from_env(cls) -> "Context":
        env = os.environ
        return cls(
            rank=int(env.get("RANK", 0)), world=int(env.get("WORLD_SIZE", 1)), local_rank=int(env.get("LOCAL_RANK", 0))
        )

    def describe(self) -> str:
        backend = dist.get_backend() if dist.is_initialized() else "none"
        return f"rank {self.rank} of {self.world} ({backend}, device {self.device})"


def init(ctx: Context) -> None:
    """Join the process group (a no-op for one process) and pin this rank's GPU."""
    if torch.cuda.is_available():
        torch.cuda.set_device(ctx.local_rank)
    if ctx.distributed and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, timeout=PG_TIMEOUT, device_id=ctx.device if backend == "nccl" else None)


def shutdown(ctx: Context) -> None:
    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()


PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL communicator was aborted")


def is_peer_error(exc: BaseException | None) -> bool:
    """An error of a collective whose peer went away (anywhere in the cause chain), not a bug here."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (PeerLost, dist.DistError)):
            return True
        if isinstance(exc, RuntimeError) and any(s in str(exc) for s in PEER_GONE):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _guard(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        if is_peer_error(exc):
            raise PeerLost(str(exc)) from exc
        raise


def barrier(ctx: Context) -> None:
    if ctx.distributed:
        _guard(dist.barrier)


@contextmanager
def rank0_first(ctx: Context):
    """Rank 0 runs the block first (tokenize and cache, publish); the others then run it (read the cache)."""
    if not ctx.main:
        barrier(ctx)
    yield
    if ctx.main:
        barrier(ctx)


def broadcast(ctx: Context, obj, src: int = 0):
    """Rank `src`'s object on every rank (a picklable value)."""
    if not ctx.distributed:
        return obj
    box = [obj]
    _guard(dist.broadcast_object_list, box, src=src)
    return box[0]


def gather(ctx: Context, obj) -> list:
    """Every rank's object, in rank order, on every rank."""
    if not ctx.distributed:
        return [obj]
    out: list = [None] * ctx.world
    _guard(dist.all_gather_object, out, obj)
    return out


def any_rank(ctx: Context, *flags: bool) -> tuple[bool, ...]:
    """Per flag: is it set on any rank? One small all-reduce, so every rank decides alike."""
    if not ctx.distributed:
        return tuple(bool(f) for f in flags)
    t = torch.tensor([int(bool(f)) for f in flags], dtype=torch.int32, device=ctx.device)
    _guard(dist.all_reduce, t, op=dist.ReduceOp.MAX)
    return tuple(bool(v) for v in t.tolist())


def unwrap(model):
    """The bare model inside a DDP wrapper (what checkpoints and exports hold)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def _local_to_detach(b, cpu=True, gather=True):
    return to_detach(b, cpu=cpu, gather=False)


class _DDP(DistributedDataParallel):
    """DDP that answers fastai's ModelResetter (AWD-LSTM keeps its hidden state between batches)."""

    def reset(self):
        if hasattr(self.module, "reset"):
            self.module.reset()


def data_parallel(learn, ctx: Context):
    """Make `learn` train on this rank's shard with averaged gradients; rank 0 evaluates alone."""
    # fastai all-gathers every metric and prediction when WORLD_SIZE > 1; rank 0 evaluates
    # alone on the whole validation set, so keep metrics and get_preds local.
    learn.to_detach = _local_to_detach
    return learn.add_cb(DataParallelCallback(ctx))


class DataParallelCallback(Callback):
    """Averages gradients across ranks (DDP for each fit); ranks > 0 skip validation, rank 0 validates on all rows."""

    order = -15  # before TrainEvalCallback, so the wrapped model is what every other callback sees

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def before_fit(self):
        ids = [self.ctx.local_rank] if self.ctx.device.type == "cuda" else None
        self.ddp = _guard(_DDP, self.learn.model, device_ids=ids)
        self.learn.model = self.ddp

    def before_train(self):
        self.learn.model = self.ddp

    def before_validate(self):
        # Rank 0 validates alone with the bare module: a DDP forward may sync buffers with
        # ranks that are not there; the others go on and meet rank 0 at the next all-reduce.
        self.learn.model = self.ddp.module
        if not self.ctx.main:
            raise CancelValidException()

    def after_fit(self):
        self.learn.model = self.ddp.module
