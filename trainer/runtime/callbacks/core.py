"""What every trainer callback shares: the fitter's `Phase`, the skipped-epoch test, and `place`, which
turns run_after / run_before into the `order` fastai's Learner sorts callbacks by."""

from __future__ import annotations

from dataclasses import dataclass, field


def skipped(learn, epoch: int) -> bool:
    """fastai still fires after_epoch for epochs that fit(start_epoch=…) skips on resume."""
    skip = next((cb for cb in learn.cbs if type(cb).__name__ == "SkipToEpoch"), None)
    return skip is not None and epoch < skip._skip_to


@dataclass(frozen=True)
class Phase:
    """One fit_one_cycle of a stage, as the callbacks see it."""

    stage: str
    index: int  # of the stage's phases, from 0
    count: int  # phases in the stage
    offset: int  # epochs of the stage before this phase
    total: int  # epochs of the stage
    metric_names: dict = field(default_factory=dict)  # fastai's metric name -> the history's
    saves_done: bool = True  # the last epoch's checkpoint marks the stage done

    @property
    def label(self) -> str:
        return f"{self.index + 1}/{self.count}"

    @property
    def last(self) -> bool:
        return self.index == self.count - 1


NO_PHASE = Phase("", 0, 1, 0, 0, saves_done=False)  # what a callback knows before the fitter's first phase


def _relations(cls, attr: str, ours: dict) -> list:
    value = getattr(cls, attr, None) or ()
    return [
        ours.get(v, v) if isinstance(v, str) else v for v in (value if isinstance(value, (tuple, list)) else (value,))
    ]


def place(*classes: type) -> None:
    """Sets each class's `order` from its run_after/run_before: the smallest order after everything it
    runs after (fastai's callbacks keep theirs), checked against everything it runs before."""
    ours = {cls.__name__: cls for cls in classes}
    orders: dict[type, float] = {}
    pending = list(classes)
    while pending:
        ready = [
            cls
            for cls in pending
            if all(a in orders or a not in ours.values() for a in _relations(cls, "run_after", ours))
            and not any(cls in _relations(other, "run_before", ours) for other in pending if other is not cls)
        ]
        if not ready:
            raise RuntimeError(f"callbacks with circular run_after/run_before: {[c.__name__ for c in pending]}")
        for cls in ready:
            after = [orders.get(a, getattr(a, "order", 0)) for a in _relations(cls, "run_after", ours)]
            after += [orders[o] for o in orders if cls in _relations(o, "run_before", ours)]
            orders[cls] = max(after, default=0) + 1
            pending.remove(cls)
    for cls, order in orders.items():
        for before in _relations(cls, "run_before", ours):
            limit = orders.get(before, getattr(before, "order", 0))
            if order >= limit:
                raise RuntimeError(
                    f"{cls.__name__} must run before {before.__name__} (order {limit}), "
                    f"but runs after what it follows (order {order})"
                )
        cls.order = order
