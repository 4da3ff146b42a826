"""fastai's event dispatch at the cost of the callbacks it calls: each event to the callbacks that define it, each
called as fastai's `Callback.__call__` would, without its attribute delegation in every batch event."""

from __future__ import annotations

from operator import attrgetter

from fastai.callback.core import (
    Callback,
    CancelBackwardException,
    CancelBatchException,
    CancelEpochException,
    CancelFitException,
    CancelStepException,
    CancelTrainException,
    CancelValidException,
    _inner_loop,
    event,
)
from fastcore.xtras import modify_exception

INNER_LOOP = frozenset(_inner_loop)
FASTAI_CALL = Callback.__call__
CANCELS = (
    CancelBatchException,
    CancelBackwardException,
    CancelEpochException,
    CancelFitException,
    CancelStepException,
    CancelTrainException,
    CancelValidException,
)


def call_callback(cb, event_name: str, training: bool):
    """fastai's `Callback.__call__`, `training` read from the learner once rather than through each callback's
    attribute delegation (fastcore's GetAttr: its slow path, for every callback in every batch event)."""
    if "training" in cb.__dict__:
        training = cb.__dict__["training"]
    res = None
    if cb.run and (event_name not in INNER_LOOP or (cb.run_train and training) or (cb.run_valid and not training)):
        try:
            res = getattr(cb, event_name)()
        except CANCELS:
            raise
        except Exception as e:  # the same exception, its message prefixed as fastai does
            raise modify_exception(  # noqa: B904
                e,
                f"Exception occured in `{cb.__class__.__name__}` when calling event `{event_name}`:\n\t{e.args[0]}",
                replace=True,
            )
    if event_name == "after_fit":
        cb.run = True
    return res


class EventDispatch:
    """A learner's `_call_one`: each event to the callbacks that define it, sorted by `order` as fastai does
    (a stable sort), once per set of callbacks. `after_fit` still reaches every callback (fastai resets each
    one's `run` there). A callback that keeps fastai's `__call__` is called as it would call it
    (`call_callback`); one with its own `__call__` through it."""

    def __init__(self, learn):
        self.learn = learn
        self.key: list = []
        self.by_event: dict[str, list] = {}

    def __getstate__(self):
        return {"learn": self.learn, "key": [], "by_event": {}}

    def __call__(self, event_name: str) -> None:
        cbs = self.learn.cbs
        cbs = getattr(cbs, "items", cbs)  # fastai's L: its list, compared element by element (identity first)
        if cbs != self.key:
            self.key, self.by_event = list(cbs), {}
        todo = self.by_event.get(event_name)
        if todo is None:
            todo = self.by_event[event_name] = self._plan(event_name)
        training = getattr(self.learn, "training", True)
        for cb, direct in todo:
            if direct:
                call_callback(cb, event_name, training)
            else:
                cb(event_name)

    def _plan(self, event_name: str) -> list[tuple]:
        """The callbacks `event_name` reaches, in fastai's order, each with whether it is called as fastai's
        `Callback.__call__` would call it (else through its own `__call__`)."""
        if not hasattr(event, event_name):
            raise Exception(f"missing {event_name}")
        ordered = sorted(self.key, key=attrgetter("order"))
        return [
            (cb, type(cb).__call__ is FASTAI_CALL and callable(getattr(type(cb), event_name, None)))
            for cb in ordered
            if event_name == "after_fit" or event_name in cb.__dict__ or callable(getattr(type(cb), event_name, None))
        ]
