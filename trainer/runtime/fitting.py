"""Stages that fit in phases and resume exactly: checkpoints, carried weights, the resume point.

`Fitter` is the one object of a run that changes while it trains: the checkpoint it resumes
from, the history, the weights finished stages carry forward, the arch in use and the
callbacks. Stages (trainer.lm.*, trainer.stages.classifier) call its methods; none of
them sets its attributes.
"""

from __future__ import annotations

from dataclasses import replace

from fastai.text.all import ProgressCallback

from trainer.runfiles.curves import run_settings
from trainer.runtime import distributed as D
from trainer.runtime import loop as L
from trainer.runtime import precision as P
from trainer.runtime.board import FOLDER, Board
from trainer.runtime.callbacks import (
    BatchProgressCallback,
    BestEpochCallback,
    BoardCallback,
    CheckpointCallback,
    EpochLogCallback,
    HeapTrimCallback,
    PatienceCallback,
    Phase,
    ResumeCallback,
    StatusCallback,
    ThroughputCallback,
)
from trainer.runtime.checkpoints import Checkpoint, Position
from trainer.runtime.preemption import Interrupted
from trainer.storage import StorageError

# Per-epoch figures are fastai's running metrics (threshold 0.5, per-label accuracy for
# multi-label): named apart from the final, tuned ones in metrics.json.
EPOCH_METRIC_NAMES = {
    "lm": {"accuracy": "token_accuracy"},
    "multi": {"accuracy_multi": "label_accuracy@0.5", "f1_score": "macro_f1@0.5"},
    "single": {"accuracy": "accuracy@argmax", "f1_score": "macro_f1@argmax"},
}
# Checkpointed stages in run order; `_bwd` ones run with trainer.bidirectional (texts read right to left).
STAGES = ("base_lm", "base_lm_bwd", "lm_finetune", "classifier", "lm_finetune_bwd", "classifier_bwd")
UNCHOSEN = object()  # no base LM decided yet (None: decided, none)


def stage_name(stage: str, backwards: bool) -> str:
    return f"{stage}_bwd" if backwards else stage


class Fitter:
    """Fitting, checkpointing and resuming the stages of one run (see the module docstring)."""

    def __init__(self, rc):
        a = rc.a
        self.rc, self.ctx, self.log, self.precision = rc, rc.ctx, rc.log, rc.precision
        self.history: list[dict] = []
        self.arch = {"emb_sz": a.emb_sz, "n_hid": a.n_hid, "n_layers": a.n_layers}
        self.lm_head = a.lm_head  # the LMs' output layer (trainer.lm.adaptive); a resumed run keeps its own
        self.resume: Checkpoint | None = None
        self.data_hash, self.labels = None, []  # what the checkpoints belong to (adopt_resume)
        self.stage_vocab: list[str] | None = None
        self.base_lm = UNCHOSEN  # the base LM the run fine-tunes from (trainer.stages.base_lm), once chosen
        # Finished stages' weights a later stage still needs ({stage: {"model", "vocab"}}), kept in
        # every later checkpoint: with trainer.bidirectional the forward models wait for the backward ones.
        self.carry: dict[str, dict] = {}
        self.epoch_log = EpochLogCallback(rc.log, self.history)
        self.throughput_cb = ThroughputCallback(self.history, world=rc.ctx.world)
        self.status_cb = StatusCallback(rc.log, self.history)
        self.ckpt_cb = CheckpointCallback(rc.ctx, rc.preemption, self.save_checkpoint, minutes=a.checkpoint_minutes)
        self.progress_cb = BatchProgressCallback(rc.log, every_s=a.progress_seconds, world=rc.ctx.world)
        self.best_cb = BestEpochCallback(self._keep_best)
        self.patience_cb = PatienceCallback(rc.ctx, self._stale, a.patience)
        self.board = (
            Board(rc.bucket, a.lang, a.run_id, rc.work / FOLDER, rc.log, settings=run_settings(vars(a)))
            if rc.ctx.main
            else None
        )
        self.board_cb = BoardCallback(self.board, self.history)

    @property
    def callbacks(self) -> list:
        return [self.epoch_log, self.throughput_cb, self.status_cb, self.ckpt_cb, self.progress_cb, self.board_cb]

    def find_resume(self) -> Checkpoint | None:
        """The newest complete checkpoint of this run id (before the tokenizer: a resumed run keeps its base LM's)."""
        self.resume = self.rc.store.latest(note=self.log.line)
        return self.resume

    def adopt_resume(self, *, data_hash: str, labels: list[str]) -> None:
        """Records what the checkpoints belong to; takes over the checkpoint's history, arch and carried weights."""
        self.data_hash, self.labels = data_hash, list(labels)
        if self.resume is None:
            return
        self.resume.check_compatible(data_hash=data_hash, labels=self.labels)
        self.history[:] = self.resume.payload.get("history", [])
        self.arch = self.resume.payload.get("arch", self.arch)
        self.lm_head = self.resume.payload.get("lm_head", "full")  # checkpoints from before the setting: full
        was = self.resume.payload.get("precision")
        if was is not None and was != self.precision:
            self.log.line(
                f"note: the checkpoint was trained in {was}, this machine runs {self.precision}: what "
                "follows differs from an uninterrupted run"
            )
        self.carry = dict(self.resume.payload.get("carry") or {})
        self.log.line(f"resuming from checkpoint: {self.resume.position.describe()}")

    def use_arch(self, arch: dict) -> None:
        """A base LM's arch wins over the config's: its weights only fit their own shapes."""
        self.arch = dict(arch)

    def choose_base_lm(self, lm) -> None:
        """Recorded in every later checkpoint: a resumed run keeps its base LM even if CURRENT moved meanwhile."""
        self.base_lm = lm

    def use_vocab(self, vocab: list[str] | None) -> None:
        """The vocabulary the current stage's checkpoints record."""
        self.stage_vocab = vocab

    def drop_carried(self, stage: str) -> None:
        self.carry.pop(stage, None)

    def detach(self, learn) -> None:
        """Removes the run's callbacks (and data parallelism): what follows is rank 0's alone."""
        learn.remove_cbs(
            [
                *self.callbacks,
                *learn.cbs.filter(
                    lambda cb: isinstance(cb, (D.DataParallelCallback, BestEpochCallback, PatienceCallback))
                ),
            ]
        )

    def _keep_best(self, learn, stage: str, epoch: int, valid_loss: float) -> None:
        """The weights of the stage's epoch with the lowest validation loss so far, carried in later
        checkpoints (a resumed run ends on the same best epoch as an uninterrupted one)."""
        best = self.carry.get(f"{stage}_best")
        if best is None or valid_loss < best["valid_loss"]:
            state = D.unwrap(learn.model).state_dict()
            self.carry[f"{stage}_best"] = {
                "model": {k: v.detach().cpu().clone() for k, v in state.items()},
                "epoch": epoch,
                "valid_loss": valid_loss,
            }

    def keep_best_start(self, learn, stage: str, valid_loss: float) -> None:
        """The stage's starting weights as its epoch 0 (the classifier's probe head): a later epoch is kept only
        with a lower validation loss, and trainer.patience counts from it."""
        self._keep_best(learn, stage, 0, valid_loss)

    def remember(self, key: str, value) -> None:
        """A small record later stages read (the probe's figures), carried in every later checkpoint."""
        self.carry[key] = value

    def _stale(self, stage: str, epoch: int) -> int:
        """Epochs since the stage's lowest validation loss (0 before any)."""
        best = self.carry.get(f"{stage}_best")
        return 0 if best is None else epoch - best["epoch"]

    def _stopped_at(self, at: Position, phases: list[tuple]) -> bool:
        """A checkpoint at an epoch's end after which trainer.patience had stopped the stage."""
        if self.rc.a.patience <= 0:
            return False
        epoch = sum(n for _, n, _ in phases[: at.phase]) + at.epoch
        return epoch > 0 and self._stale(at.stage, epoch) >= self.rc.a.patience

    def restore_best(self, learn, stage: str, epochs: int) -> dict | None:
        """Loads the stage's best epoch (lowest validation loss) into `learn`; its record, or None."""
        best = self.carry.pop(f"{stage}_best", None)
        if best is None:
            return None
        D.unwrap(learn.model).load_state_dict(best["model"])
        which = (
            "the linear probe's head (epoch 0, before fine-tuning)"
            if best["epoch"] == 0
            else f"epoch {best['epoch']} of {epochs}"
        )
        self.log.line(
            f"{stage}: {which} had the lowest validation loss ({best['valid_loss']:.4f}); its weights are kept"
        )
        return {"epoch": best["epoch"], "of": epochs, "valid_loss": round(best["valid_loss"], 5)}

    def keep(self, stage: str, learn, vocab, best: dict | None = None) -> None:
        """Carries a finished stage's weights (on the CPU) in later checkpoints, with its best-epoch record."""
        state = D.unwrap(learn.model).state_dict()
        self.carry[stage] = {
            "model": {k: v.detach().cpu().clone() for k, v in state.items()},
            "vocab": list(vocab),
            "best": best,
        }

    def resumed_past(self, stage: str) -> bool:
        """The checkpoint is from a later stage: `stage` finished before the interruption."""
        at = self.resume.position.stage if self.resume is not None else None
        return at in STAGES and STAGES.index(at) > STAGES.index(stage)

    def save_checkpoint(self, learn, position: Position, rng_states: list[dict], **extra) -> None:
        """Called on every rank at the same point; rank 0 writes."""
        if not self.ctx.main:
            return
        payload = {
            "rng": rng_states,
            "history": list(self.history),
            "data_hash": self.data_hash,
            "labels": self.labels,
            "world": self.ctx.world,
            "arch": self.arch,
            "lm_head": self.lm_head,
            "precision": self.precision,
            "vocab": self.stage_vocab,
            **extra,
        }
        if self.carry:
            payload["carry"] = self.carry
        if self.base_lm is not UNCHOSEN:  # a resumed run keeps its base LM even if CURRENT moved meanwhile
            payload["base_lm"] = self.base_lm.id if self.base_lm is not None else None
        if learn is not None:
            payload["model"] = D.unwrap(learn.model).state_dict()
            payload["opt"] = learn.opt.state_dict() if learn.opt is not None else None
        try:
            name = self.rc.store.save(position, payload)
        except StorageError as exc:  # the storage policy gave up: training goes on, the next checkpoint tries again
            self.log.line(
                f"checkpoint not saved ({exc}); training goes on and the next checkpoint tries again "
                f"(a resume now would start from the one before)"
            )
            return
        if position.batch or position.done:
            self.log.line(f"checkpoint: {position.describe()} -> {name}")

    def resume_point(self, stage: str) -> Position | None:
        if self.resume is None or self.resume.position.stage != stage:
            return None
        return self.resume.position

    def setup(self, learn):
        """Every learner of the run: plain logs, bounded memory, the loop without host syncs (trainer.runtime.loop),
        this run's precision, data parallel across ranks."""
        learn.remove_cb(ProgressCallback)
        L.apply(learn)
        learn.logger = lambda *_: None  # Recorder would print raw lists; EpochLogCallback logs
        learn.add_cb(HeapTrimCallback())
        P.apply(learn, self.precision)
        if self.ctx.distributed:
            D.data_parallel(learn, self.ctx)
        return learn

    def fit_phases(
        self,
        learn,
        stage: str,
        phases: list[tuple],
        *,
        metrics: str = "lm",
        last_saves_done: bool = True,
        keep_best: bool = False,
    ) -> None:
        """phases: (freeze_to or None for all layers, epochs, lr). Resumes at the checkpoint's batch.

        metrics: "lm", "multi" or "single" (how the epoch figures are named). The last epoch's
        checkpoint marks the stage done unless the stage saves its own (`last_saves_done`).
        keep_best: track the epoch with the lowest validation loss (restore_best loads it) and stop the stage
        after trainer.patience epochs without a lower one (its final checkpoint then marks it done)."""
        learn.add_cbs([*self.callbacks, *([self.best_cb, self.patience_cb] if keep_best else [])])
        at = self.resume_point(stage)
        if at is not None and keep_best and not at.batch and self._stopped_at(at, phases):
            at = replace(at, done=True)  # it had stopped early (trainer.patience); its done checkpoint was not written
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
            phase = Phase(stage, i, len(phases), offset, total, EPOCH_METRIC_NAMES[metrics], last_saves_done)
            run_cbs = [*self.callbacks, self.best_cb, self.patience_cb]
            own = [cb for cb in learn.cbs if hasattr(type(cb), "begin_phase") and all(cb is not r for r in run_cbs)]
            for cb in [*run_cbs, *own]:  # the run's callbacks, and a stage's own (trainer.lm.parts)
                cb.begin_phase(phase)
            L.fit_one_cycle(learn, n, lr, start_epoch=at.epoch if cbs else 0, cbs=cbs)
            at = None
            stopped, self.patience_cb.stopped = self.patience_cb.stopped, 0
            if keep_best and stopped:  # saved first: a SIGTERM now still finds the stage done
                self.ckpt_cb.save_done(stage, len(phases))
            if any(D.any_rank(self.ctx, self.rc.preemption.requested)):
                raise Interrupted("SIGTERM")
            if keep_best and stopped:
                self.log.line(
                    f"{stage}: stopped after epoch {stopped} of {total}: no lower validation loss for "
                    f"{self.rc.a.patience} epochs (trainer.patience)"
                )
                return
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
            self.log.line(
                f"note: checkpoint from {p.get('world')} process(es), now {self.ctx.world}: "
                "data order after the resume differs from an uninterrupted run"
            )
        self.log.line(f"{at.stage}: resumed at {at.describe()}")
        return ResumeCallback(at.epoch, at.batch, rng and rng["epoch"], rng and rng["now"], rng and rng.get("hidden"))
