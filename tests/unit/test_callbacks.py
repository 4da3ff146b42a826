"""trainer.runtime.callbacks: the order fastai runs them in comes from what each declares it runs after or before."""

from __future__ import annotations

import pytest
from fastai.callback.core import Callback, TrainEvalCallback
from fastai.callback.schedule import ParamScheduler
from fastai.learner import Recorder

from trainer.runtime.callbacks import (
    BatchProgressCallback,
    CheckpointCallback,
    EpochLogCallback,
    HeapTrimCallback,
    Phase,
    ResumeCallback,
    StatusCallback,
    place,
)

OURS = [ResumeCallback, EpochLogCallback, StatusCallback, CheckpointCallback, BatchProgressCallback, HeapTrimCallback]


def test_the_run_callbacks_run_in_the_declared_order():
    by_order = sorted([TrainEvalCallback, Recorder, ParamScheduler, *OURS], key=lambda cb: cb.order)
    position = {cb: i for i, cb in enumerate(by_order)}
    assert position[TrainEvalCallback] < position[ResumeCallback] < position[Recorder]
    # the epoch's values exist before they are logged; log line, status, checkpoint, progress, heap trim
    assert max(position[Recorder], position[ParamScheduler]) < position[EpochLogCallback]
    assert [cb for cb in by_order if cb in OURS[1:]] == OURS[1:]
    assert len({cb.order for cb in OURS}) == len(OURS)


def test_a_circle_or_an_impossible_place_is_refused():
    class First(Callback):
        run_after = "Second"

    class Second(Callback):
        run_after = First

    with pytest.raises(RuntimeError, match="circular"):
        place(First, Second)

    class TooLate(Callback):
        run_after, run_before = Recorder, TrainEvalCallback  # Recorder runs long after TrainEvalCallback

    with pytest.raises(RuntimeError, match="must run before TrainEvalCallback"):
        place(TooLate)


def test_run_before_among_ours_places_the_other_one_later():
    class Early(Callback):
        run_before = "Late"

    class Late(Callback):
        pass

    place(Late, Early)  # declared in any order
    assert Early.order < Late.order


def test_every_phase_callback_takes_what_it_needs_from_the_phase():
    phase = Phase(
        "classifier", index=2, count=3, offset=4, total=6, metric_names={"f1_score": "macro_f1@0.5"}, saves_done=True
    )
    log = type("Log", (), {"line": lambda *a: None, "update": lambda *a, **k: None})()
    epoch_log, status = EpochLogCallback(log, []), StatusCallback(log)
    ckpt = CheckpointCallback(None, None, None, minutes=0)
    progress = BatchProgressCallback(log, every_s=60)
    for cb in (epoch_log, status, ckpt, progress):
        cb.begin_phase(phase)
    assert (epoch_log.stage, epoch_log.phase, epoch_log.offset, epoch_log.total) == ("classifier", "3/3", 4, 6)
    assert epoch_log.names == {"f1_score": "macro_f1@0.5"} and status.offset == 4
    assert (ckpt.stage, ckpt.phase_idx, ckpt.last_phase) == ("classifier", 2, True)
    assert (progress.stage, progress.offset, progress.total) == ("classifier", 4, 6)
    ckpt.begin_phase(Phase("lm_finetune", 0, 2, 0, 4, saves_done=False))
    assert ckpt.last_phase is False


def test_patience_stops_the_fit_after_epochs_without_a_lower_validation_loss():
    from types import SimpleNamespace

    from fastai.callback.core import CancelFitException

    from trainer.runtime import distributed as D
    from trainer.runtime.callbacks import PatienceCallback, Phase

    one = D.Context(rank=0, world=1, local_rank=0)  # a single process: broadcast returns its own decision
    best_epoch = {"classifier": 3}
    cb = PatienceCallback(one, lambda stage, epoch: epoch - best_epoch[stage], patience=2)
    cb.begin_phase(Phase("classifier", 3, 4, offset=3, total=20))
    cb.learn = SimpleNamespace(cbs=[], epoch=0)  # the phase's first epoch: epoch 4 of the stage
    cb.after_epoch()
    assert cb.stopped == 0
    cb.learn.epoch = 1  # epoch 5: two epochs since the best (3)
    with pytest.raises(CancelFitException):
        cb.after_epoch()
    assert cb.stopped == 5
    never = PatienceCallback(one, lambda stage, epoch: 99, patience=0)  # 0: every epoch runs
    never.begin_phase(Phase("classifier", 0, 1, offset=0, total=5))
    never.learn = SimpleNamespace(cbs=[], epoch=4)
    never.after_epoch()
    assert never.stopped == 0


def test_the_epoch_eta_counts_the_validation_pass_at_its_measured_speed():
    from types import SimpleNamespace

    import torch

    now = [0.0]
    lines = []
    log = type("Log", (), {"line": lambda self, text: lines.append(text), "update": lambda *a, **k: None})()
    cb = BatchProgressCallback(log, every_s=0, clock=lambda: now[0])
    cb.begin_phase(Phase("base_lm", 0, 1, offset=0, total=2))
    cb.learn = SimpleNamespace(
        training=True, yb=[1], xb=[torch.zeros(4, 8)], epoch=0, n_iter=10, iter=0, dls=SimpleNamespace(valid=range(5))
    )

    def train(batches: int, seconds_each: float):
        cb.before_train()
        for i in range(batches):
            now[0] += seconds_each
            cb.learn.iter = i
            cb.after_batch()

    cb.after_validate()  # a validation cancelled before this callback saw it begin (another rank's): not timed
    train(3, 2.0)  # 2 s a batch: 7 batches left, then 5 validation batches at 0.8 x 2 s before any is timed
    assert lines[-1].endswith("epoch ETA 22s, stage ETA 50s"), lines[-1]
    cb.before_validate()
    now[0] += 5 * 0.4  # timed: 0.4 s a validation batch
    cb.after_validate()
    cb.learn.epoch = 1
    train(3, 2.0)
    assert lines[-1].endswith("epoch ETA 16s"), lines[-1]  # 7 x 2 s + 5 x 0.4 s; the last epoch: no stage ETA
    cb.begin_phase(Phase("classifier", 0, 1, offset=0, total=1))  # another stage: its validation is not timed yet
    cb.learn.epoch = 0
    train(3, 2.0)
    assert lines[-1].endswith("epoch ETA 22s"), lines[-1]


def test_status_carries_the_last_epoch_figures_for_followers():
    from types import SimpleNamespace

    updates = []
    log = type("Log", (), {"line": lambda *a: None, "update": lambda self, **k: updates.append(k)})()
    history = [
        {"stage": "classifier", "phase": "1/1", "epoch": 3, "train_loss": 0.6, "valid_loss": 0.63, "macro_f1": 0.55}
    ]
    cb = StatusCallback(log, history)
    cb.begin_phase(Phase("classifier", 0, 1, offset=2, total=4))
    cb.learn = SimpleNamespace(epoch=0, cbs=[])
    cb.after_epoch()
    assert updates == [{"epoch": 3, "last_epoch": {"train_loss": 0.6, "valid_loss": 0.63, "macro_f1": 0.55}}]


def test_an_epochs_record_keeps_its_learning_rate_and_its_log_line_does_not_show_it():
    from types import SimpleNamespace

    lines, history = [], []
    log = SimpleNamespace(line=lines.append)
    epoch_log = EpochLogCallback(log, history)
    epoch_log.begin_phase(Phase("classifier", index=0, count=1, offset=0, total=2, metric_names={}))
    recorder = SimpleNamespace(metric_names=["epoch", "train_loss", "valid_loss", "time"], log=[0, 0.5, 0.25, "0:01"])
    groups = [{"lr": 1e-4}, {"lr": 2e-3}]  # the head's rate is the last group's
    epoch_log.learn = SimpleNamespace(cbs=[], epoch=0, recorder=recorder, opt=SimpleNamespace(hypers=groups))
    epoch_log.after_epoch()
    assert history == [
        {"stage": "classifier", "phase": "1/1", "epoch": 1, "train_loss": 0.5, "valid_loss": 0.25, "lr": 2e-3}
    ]
    assert lines == ["classifier [1/1] epoch 1/2  train_loss 0.5000  valid_loss 0.2500"]


def test_an_lm_epochs_record_keeps_its_tokens_per_second_from_its_second_batch_on():
    """The figure both views of the run show (it was TensorBoard's alone): every rank's tokens over the time
    from the end of the first batch; a classifier's epoch has none."""
    from types import SimpleNamespace

    import torch

    from trainer.runtime.callbacks import ThroughputCallback

    now = [100.0]
    history: list[dict] = []
    cb = ThroughputCallback(history, world=2, clock=lambda: now[0])
    for stage in ("lm_finetune", "classifier"):
        cb.learn = SimpleNamespace(cbs=[], epoch=0, training=True, yb=(1,), xb=(torch.zeros(4, 8),))
        cb.before_train()
        for _ in range(3):  # 3 batches of 32 tokens, one second each: the first one's set-up is not counted
            now[0] += 1.0
            cb.after_batch()
        history.append({"stage": stage, "phase": "1/1", "epoch": 1})
        cb.after_epoch()
    assert history[0]["tokens_per_s"] == 2 * 2 * 32 / 2 and "tokens_per_s" not in history[1]
