"""The trainer's extras as fastai callbacks, one concern per module (as fastai splits its own):
resume.py (exact resume), progress.py (epoch log, LM throughput, status.json, batch progress), tracker.py (best epoch,
patience), checkpoint.py (exact-resume saves, SIGTERM), memory.py (heap trim), board.py (TensorBoard curves);
core.py has what they share.

Each declares where it runs relative to the others (`run_after` / `run_before`, as fastai's own callbacks
do); `place` turns those into the `order` fastai's Learner sorts by, once, here. The fitter
(trainer.runtime.fitting) announces every phase with `begin_phase(Phase)`: each callback keeps what it needs.
"""

from trainer.runtime.callbacks.board import BoardCallback
from trainer.runtime.callbacks.checkpoint import CheckpointCallback
from trainer.runtime.callbacks.core import NO_PHASE, Phase, place, skipped
from trainer.runtime.callbacks.memory import HeapTrimCallback
from trainer.runtime.callbacks.progress import (
    VALID_SHARE,
    BatchProgressCallback,
    EpochLogCallback,
    StatusCallback,
    ThroughputCallback,
)
from trainer.runtime.callbacks.resume import ResumeCallback, lm_hidden
from trainer.runtime.callbacks.tracker import BestEpochCallback, PatienceCallback

place(
    ResumeCallback,
    EpochLogCallback,
    ThroughputCallback,
    StatusCallback,
    BestEpochCallback,
    CheckpointCallback,
    PatienceCallback,
    BatchProgressCallback,
    HeapTrimCallback,
    BoardCallback,
)

__all__ = [
    "NO_PHASE",
    "VALID_SHARE",
    "BatchProgressCallback",
    "BestEpochCallback",
    "BoardCallback",
    "CheckpointCallback",
    "EpochLogCallback",
    "HeapTrimCallback",
    "PatienceCallback",
    "Phase",
    "ResumeCallback",
    "StatusCallback",
    "ThroughputCallback",
    "lm_hidden",
    "place",
    "skipped",
]
