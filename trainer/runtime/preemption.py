"""SIGTERM for the whole trainer process: a flag inside fit() (a checkpoint is saved first), `Interrupted` outside
it."""

from __future__ import annotations

import signal

from trainer.runtime import distributed as D


class Interrupted(Exception):
    """SIGTERM arrived (Spot notice, destroy) or a peer rank went away; what could be saved is saved."""


class Preemption:
    """SIGTERM handling for the whole process: inside fit() a flag the batch loop polls (so a
    checkpoint can be written), outside it an immediate `Interrupted` (rank 0) or death (other
    ranks: nothing to save, and they may be blocked in a collective where Python cannot run)."""

    def __init__(self, ctx: D.Context):
        self.ctx, self.requested, self.in_fit = ctx, False, False
        self.saved = None  # the Position of the newest checkpoint this process saved (CheckpointCallback)

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, _frame):
        if self.requested:  # a second notice (the metadata watch's, then the shutdown script's) changes nothing
            return
        self.requested = True
        if self.in_fit:
            return
        if not self.ctx.main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
        raise Interrupted("SIGTERM")

    def stopped_at(self) -> str:
        """What status.json and the log say of this stop: where the run resumes from."""
        p = self.saved
        if p is None:
            return "preempted before this start saved a checkpoint: the run resumes from its newest one"
        if p.done:
            return f"preempted: checkpoint saved at the end of {p.stage}"
        return f"preempted: checkpoint saved at epoch {p.epoch + 1} batch {p.batch} ({p.stage} phase {p.phase + 1})"

    def check(self) -> None:
        """Raise at a safe point if a signal arrived meanwhile."""
        if self.requested:
            raise Interrupted("SIGTERM")
