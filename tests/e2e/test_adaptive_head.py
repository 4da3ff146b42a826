"""A base LM pretrained under the adaptive softmax (trainer.lm_head: adaptive): exact resume from a
mid-epoch checkpoint, and the full-softmax layout it publishes (fine-tuning into an adaptive head from a
full-softmax LM: tests/e2e/test_lm_pretrain.py; the published layout loading into fastai's full-softmax
model: tests/unit/test_adaptive_head.py)."""

from __future__ import annotations

import io
import json
import signal

import torch

from tests.support.trainer_proc import stage_sample, trainer, wait_status
from trainer.storage import open_bucket

# one epoch of ~20 batches on the sample corpus: room for an interruption inside it
PRETRAIN = (
    "--job",
    "pretrain-lm",
    "--lm-head",
    "adaptive",
    "--epochs-base-lm",
    "1",
    "--bs",
    "8",
    "--checkpoint-minutes",
    "0",
)


def _published(bucket) -> tuple[dict, dict]:
    lm_id = json.loads(bucket.read_bytes("fr/lm/CURRENT"))["id"]
    meta = json.loads(bucket.read_bytes(f"fr/lm/{lm_id}/meta.json"))
    weights = torch.load(io.BytesIO(bucket.read_bytes(f"fr/lm/{lm_id}/weights.pth")), weights_only=True)
    return meta, weights


def test_an_adaptive_pretrain_resumes_mid_epoch_exactly_and_publishes_the_full_layout(tmp_path):
    uri = {name: f"file://{tmp_path / name}" for name in ("whole", "cut")}
    whole, cut = open_bucket(uri["whole"]), open_bucket(uri["cut"])
    for bucket in (whole, cut):
        stage_sample(bucket)
    proc = trainer(uri["whole"], "p", *PRETRAIN)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out

    proc = trainer(uri["cut"], "p", *PRETRAIN, "--progress-seconds", "0", start_new_session=True)
    wait_status(
        cut,
        "p",
        lambda s: (
            s["stage"] == "base_lm"
            and s.get("progress") is not None
            and 3 <= s["progress"]["batch"] < s["progress"]["batches"] - 3
        ),
        proc,
    )
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    pointer = json.loads(cut.read_bytes("fr/runs/p/checkpoints/LATEST.ckpt.json"))["position"]
    assert pointer["stage"] == "base_lm" and pointer["batch"] > 0  # inside an epoch
    # resumed without the setting (full by default): the run keeps the head its checkpoint was trained with
    proc = trainer(uri["cut"], "p", *[a for a in PRETRAIN if a not in ("--lm-head", "adaptive")])
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    log = cut.read_appended("fr/runs/p/log.txt")[0].decode()
    assert "base_lm: resumed at" in log and "LM head: adaptive softmax, a shortlist of" in log

    (meta, weights), (meta_cut, weights_cut) = _published(whole), _published(cut)
    assert meta["id"] == meta_cut["id"] and meta["head"] == "adaptive"
    assert meta["perplexity"] == meta_cut["perplexity"] > 1
    assert weights.keys() == weights_cut.keys() and all(torch.equal(weights[k], weights_cut[k]) for k in weights)
    # fastai's tied full-softmax layout: what `lm import`, `lm use` and fine-tuning read
    assert torch.equal(weights["1.decoder.weight"], weights["0.encoder.weight"]) and "1.decoder.bias" in weights
    assert not any(".asm." in k for k in weights)
