"""No training batch of the trainer's loop makes the host wait for the device (benchmarks/loop_overhead.py counts
them on a CPU: a tensor that would live on the GPU read as a number, copied to the host, or sized by its values)."""

from __future__ import annotations

import pytest
import torch
from fastai.callback.core import Callback

from benchmarks.loop_overhead import count_syncs


class ReadsTheLoss(Callback):
    """What fastai's Recorder did every batch: the loss as a number on the host."""

    def after_batch(self):
        if self.training:
            float(self.learn.loss)


class DropsTheRowCounts(Callback):
    """A batch without the loader's row counts: the classifier's encoder counts each chunk's rows on the device and
    reads the count, as fastai's SentenceEncoder does."""

    def before_batch(self):
        self.learn.xb = tuple(x.as_subclass(torch.Tensor).clone() for x in self.xb)


@pytest.mark.parametrize("stage", ["lm", "clf"])
def test_a_training_batch_makes_no_host_sync(stage):
    counted = count_syncs(stage)
    assert counted["batches"] >= 10
    assert counted["loop"] == 0, counted["calls"]
    if stage == "clf":  # the LM's adaptive head reads its clusters' sizes: the step's own
        assert counted["step"] == 0, counted["calls"]


def test_the_encoders_row_counts_read_on_the_device_are_counted():
    counted = count_syncs("clf", extra_cbs=(DropsTheRowCounts(),))
    assert counted["step"] >= 1, counted["calls"]
    assert all("core.forward" in call for call in counted["calls"]), counted["calls"]


def test_a_loss_read_every_batch_is_counted():
    counted = count_syncs("lm", extra_cbs=(ReadsTheLoss(),))
    assert counted["loop"] == pytest.approx(1.0), counted["calls"]
    assert any("ReadsTheLoss" in call or "after_batch" in call for call in counted["calls"]), counted["calls"]


def test_the_benchmark_measures_both_stages_on_the_cpu(tmp_path):
    """The table the GPU call's loop step makes, at the smallest size: a GPU call cannot fail on a typo here."""
    import json

    from benchmarks.loop_overhead import main

    out = tmp_path / "rows.json"
    assert main(["--sizes", "tiny", "--batches", "8", "--bs", "16", "--json-out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["stage"] for r in rows] == ["lm_finetune", "classifier"], rows
    for row in rows:
        assert "error" not in row, row
        assert row["bare_ms"] > 0 and row["loop_ms"] > 0 and row["syncs_per_batch"] == 0, row
        assert row["profile_ms_per_batch"]["callbacks"], row
