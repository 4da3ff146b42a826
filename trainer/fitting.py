"""Stages that fit in phases and resume exactly: checkpoints, carried weights, the resume point.

`StagedFit` is the part of a run (trainer.pipeline.Run) that every stage's fit goes through.
It uses the run's `a` (arguments), `ctx`, `log`, `store`, `resume`, `history`, `arch`,
`data`, `data_hash`, `stage_vocab`, `base`/`base_chosen`, `carry`, `precision`,
`preemption` and its four callbacks (`epoch_log`, `status_cb`, `ckpt_cb`, `progress_cb`).
"""
from __future__ import annotations

from fastai.text.all import ProgressCallback

from trainer import distributed as D
from trainer import precision as P
from trainer.callbacks import HeapTrimCallback, Interrupted, ResumeCallback
from trainer.checkpoints import Position

# Per-epoch figures are fastai's running metrics (threshold 0.5, per-label accuracy for
# multi-label): named apart from the final, tuned ones in metrics.json.
EPOCH_METRIC_NAMES = {"lm": {"accuracy": "token_accuracy"},
                      "multi": {"accuracy_multi": "label_accuracy@0.5", "f1_score": "macro_f1@0.5"},
                      "single": {"accuracy": "accuracy@argmax", "f1_score": "macro_f1@argmax"}}
# Checkpointed stages in run order; `_bwd` ones run with trainer.bidirectional (texts read right to left).
STAGES = ("base_lm", "base_lm_bwd", "lm_finetune", "classifier", "lm_finetune_bwd", "classifier_bwd")


def stage_name(stage: str, backwards: bool) -> str:
    return f"{stage}_bwd" if backwards else stage


class StagedFit:
    """Fitting, checkpointing and resuming the stages of a run (see the module docstring)."""

    def adopt_resume(self) -> None:
        """Takes over the checkpoint's history, arch and carried weights (after the data is known)."""
        if self.resume is None:
            return
        self.resume.check_compatible(data_hash=self.data_hash, labels=self.data.label_names)
        self.history[:] = self.resume.payload.get("history", [])
        self.arch = self.resume.payload.get("arch", self.arch)
        self.carry = dict(self.resume.payload.get("carry") or {})
        self.log.line(f"resuming from checkpoint: {self.resume.position.describe()}")

    def keep(self, stage: str, learn, vocab) -> None:
        """Carries a finished stage's weights (on the CPU) in later checkpoints."""
        state = D.unwrap(learn.model).state_dict()
        self.carry[stage] = {"model": {k: v.detach().cpu().clone() for k, v in state.items()}, "vocab": list(vocab)}

    def resumed_past(self, stage: str) -> bool:
        """The checkpoint is from a later stage: `stage` finished before the interruption."""
        at = self.resume.position.stage if self.resume is not None else None
        return at in STAGES and STAGES.index(at) > STAGES.index(stage)

    def save_checkpoint(self, learn, position: Position, rng_states: list[dict], **extra) -> None:
        """Called on every rank at the same point; rank 0 writes."""
        if not self.ctx.main:
            return
        payload = {"rng": rng_states, "history": list(self.history), "data_hash": self.data_hash,
                   "labels": self.data.label_names, "world": self.ctx.world, "arch": self.arch,
                   "vocab": self.stage_vocab, **extra}
        if self.carry:
            payload["carry"] = self.carry
        if self.base_chosen:  # a resumed run keeps its base LM even if CURRENT moved meanwhile
            payload["base_lm"] = self.base.id if self.base is not None else None
        if learn is not None:
            payload["model"] = D.unwrap(learn.model).state_dict()
            payload["opt"] = learn.opt.state_dict() if learn.opt is not None else None
        name = self.store.save(position, payload)
        if position.batch or position.done:
            self.log.line(f"checkpoint: {position.describe()} -> {name}")

    def resume_point(self, stage: str) -> Position | None:
        if self.resume is None or self.resume.position.stage != stage:
            return None
        return self.resume.position

    def setup(self, learn):
        """Every learner of the run: plain logs, bounded memory, this run's precision, data parallel across ranks."""
        learn.remove_cb(ProgressCallback)
        learn.logger = lambda *_: None  # Recorder would print raw lists; EpochLogCallback logs
        learn.add_cb(HeapTrimCallback())
        P.apply(learn, self.precision)
        if self.ctx.distributed:
            D.data_parallel(learn, self.ctx)
        return learn

    def fit_phases(self, learn, stage: str, phases: list[tuple], *, last_saves_done: bool = True) -> None:
        """phases: (freeze_to or None for all layers, epochs, lr). Resumes at the checkpoint's batch.

        The last epoch's checkpoint marks the stage done unless the stage saves its own (`last_saves_done`)."""
        learn.add_cbs([self.epoch_log, self.status_cb, self.ckpt_cb, self.progress_cb])
        at = self.resume_point(stage)
        if at is not None and (at.done or at.phase >= len(phases)):
            # Every phase ran before the interruption: the weights are the checkpoint's, not a fresh model's.
            D.unwrap(learn.model).load_state_dict(self.resume.payload["model"])
            self.log.line(f"{stage}: all epochs finished before the interruption; using the checkpoint's weights")
            return
        total, offset = sum(n for _, n, _ in phases), 0
        for i, (freeze_to, n, lr) in enumerate(phases):
            if at is not None and i < at.phase:
                offset += n
                continue
            learn.unfreeze() if freeze_to is None else learn.freeze_to(freeze_to)
            cbs = []
            if at is not None and i == at.phase:
                cbs = [self.restore(learn, at)]
            self.epoch_log.stage, self.epoch_log.phase, self.epoch_log.total = stage, f"{i + 1}/{len(phases)}", total
            self.epoch_log.names = EPOCH_METRIC_NAMES[
                "lm" if not stage.startswith("classifier") else "multi" if self.data.multi_label else "single"]
            self.epoch_log.offset = self.status_cb.offset = self.progress_cb.offset = offset
            self.progress_cb.stage, self.progress_cb.total = stage, total
            self.ckpt_cb.stage, self.ckpt_cb.phase_idx, self.ckpt_cb.last_phase = (
                stage, i, last_saves_done and i == len(phases) - 1)
            learn.fit_one_cycle(n, lr, start_epoch=at.epoch if cbs else 0, cbs=cbs)
            at = None
            if any(D.any_rank(self.ctx, self.preemption.requested)):
                raise Interrupted("SIGTERM")
            offset += n

    def restore(self, learn, at: Position) -> ResumeCallback:
        """Loads the checkpoint's weights (and optimizer, inside a phase) into `learn`."""
        p = self.resume.payload
        D.unwrap(learn.model).load_state_dict(p["model"])
        if (at.epoch or at.batch) and p.get("opt") is not None:
            learn.opt.load_state_dict(p["opt"])  # freeze_to() cleared it, as at a phase start
        same_world = p.get("world") == self.ctx.world
        rng = p["rng"][self.ctx.rank] if same_world else None
        if not same_world:
            self.log.line(f"note: checkpoint from {p.get('world')} process(es), now {self.ctx.world}: "
                          "data order after the resume differs from an uninterrupted run")
        self.log.line(f"{at.stage}: resumed at {at.describe()}")
        return ResumeCallback(at.epoch, at.batch, rng and rng["epoch"], rng and rng["now"], rng and rng.get("hidden"))
