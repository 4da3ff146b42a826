"""No training batch of the trainer's loop makes the host wait for the device (benchmarks/loop_overhead.py counts
them on a CPU: a tensor that would live on the GPU read as a number, copied to the host, or sized by its values)."""

from __future__ import annotations

import pytest
from fastai.callback.core import Callback

from benchmarks.loop_overhead import count_syncs


class ReadsTheLoss(Callback):
    """What fastai's Recorder did every batch: the loss as a number on the host."""

    def after_batch(self):
        if self.training:
            float(self.learn.loss)


@pytest.mark.parametrize("stage", ["lm", "clf"])
def test_a_training_batch_makes_no_host_sync(stage):
    counted = count_syncs(stage)
    assert counted["batches"] >= 10
    assert counted["loop"] == 0, counted["calls"]


def test_a_loss_read_every_batch_is_counted():
    counted = count_syncs("lm", extra_cbs=(ReadsTheLoss(),))
    assert counted["loop"] == pytest.approx(1.0), counted["calls"]
    assert any("ReadsTheLoss" in call or "after_batch" in call for call in counted["calls"]), counted["calls"]
