"""trainer.bidirectional: backward LMs and classifiers, the forward+backward ensemble, their resume.

Unit tests for the reversal and the ensemble figures; tiny end-to-end runs for the rest
(the trainer as a subprocess, a file:// bucket).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.support.project import TINY_TRAINER_ARGS
from tests.support.trainer_proc import sigterm_at, stage_sample, trainer, wait_status
from trainer.classification import ensemble
from trainer.storage import open_bucket
from trainer.text.tokens import TokenIds

BIDIRECTIONAL = ("--bidirectional", "true")


def test_reversed_reads_every_text_right_to_left_and_keeps_text_order():
    table = TokenIds(
        ["a", "b", "c", "d"], np.array([0, 1, 2, 3, 3, 2], dtype=np.int32), np.array([0, 3, 3, 4, 6], dtype=np.int64)
    )  # texts: abc, (empty), d, dc
    back = table.reversed()
    assert [back.text(i).tolist() for i in range(len(back))] == [[2, 1, 0], [], [3], [2, 3]]
    assert back.vocab is table.vocab and back.reversed() == table
    assert table.select([2, 0]).reversed() == back.select([2, 0])


def test_ensemble_averages_probabilities_and_tunes_its_own_thresholds():
    labels = ["a", "b"]
    # Single-label: each model is wrong on a different row, confidently right on the others.
    targets = np.array([[1, 0], [0, 1], [1, 0], [0, 1]])
    fwd = np.array([[0.4, 0.6], [0.1, 0.9], [0.9, 0.1], [0.2, 0.8]])
    bwd = np.array([[0.9, 0.1], [0.6, 0.4], [0.8, 0.2], [0.1, 0.9]])
    out = ensemble.figures(
        (fwd, fwd),
        (bwd, bwd),
        valid_targets=targets,
        scored_targets=targets,
        labels=labels,
        multi_label=False,
        allow_empty=False,
    )
    assert out["backward"]["accuracy"] == 0.75 and out["ensemble"]["accuracy"] == 1.0
    assert out["ensemble"]["per_label"]["a"]["threshold"] is None
    # Multi-label: each model's thresholds are tuned on its own validation probabilities (label a:
    # forward 0.3, backward 0.5, mean 0.4 on the positive rows), then the scored rows are decided.
    valid_targets = np.array([[1, 1], [0, 1], [1, 0], [0, 0]])
    fwd_valid = np.array([[0.3, 0.9], [0.05, 0.9], [0.3, 0.1], [0.05, 0.1]])
    bwd_valid = np.array([[0.5, 0.9], [0.25, 0.9], [0.5, 0.1], [0.25, 0.1]])
    scored_targets = np.array([[1, 0], [0, 1]])
    fwd_scored, bwd_scored = np.array([[0.45, 0.1], [0.2, 0.9]]), np.array([[0.45, 0.1], [0.45, 0.9]])
    out = ensemble.figures(
        (fwd_valid, fwd_scored),
        (bwd_valid, bwd_scored),
        valid_targets=valid_targets,
        scored_targets=scored_targets,
        labels=labels,
        multi_label=True,
        allow_empty=True,
    )
    assert 0.15 < out["backward"]["per_label"]["a"]["threshold"] <= 0.5
    assert 0.15 < out["ensemble"]["per_label"]["a"]["threshold"] <= 0.4  # from the mean: 0.15 on the negatives
    # backward: a at 0.45 on both rows is one threshold's call; the ensemble's mean (0.45, 0.325) splits them
    assert out["ensemble"]["per_label"]["a"]["f1"] == 1.0
    line = ensemble.summary({"macro_f1": 0.5}, out)
    assert "ensemble 1.000" in line and "+0.500" in line


def test_sigterm_in_the_backward_classifier_resumes_with_the_forward_model_carried(tmp_path, project):
    """The forward classifier finished before the interruption: its weights travel in the backward
    stages' checkpoints, so the resumed run scores exactly as an uninterrupted one, all three models."""
    uri = f"file://{tmp_path / 'bucket'}"
    bucket = open_bucket(uri)
    stage_sample(bucket)
    args = (*BIDIRECTIONAL, "--base-lm", "pretrain-inline", "--epochs-clf", "7", "--checkpoint-minutes", "0")
    proc = trainer(uri, "whole", *args)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    [inline] = {k.split("/")[2] for k in bucket.list("fr/lm/")}
    meta = json.loads(bucket.read_bytes(f"fr/lm/{inline}/meta.json"))
    assert meta["backward"] is True and bucket.exists(f"fr/lm/{inline}/weights_bwd.pth")
    # Later checkpoints carry the forward classifier (the published base LM is fetched on a resume) and, in the
    # stage's own checkpoints, the backward classifier's best epoch (trainer.best_epoch): a run that stops after
    # the last one still evaluates the best weights, not the last.
    import io

    import torch

    pointer = json.loads(bucket.read_bytes("fr/runs/whole/checkpoints/LATEST.ckpt.json"))
    last = torch.load(io.BytesIO(bucket.read_bytes(f"fr/runs/whole/{pointer['key']}")), weights_only=False)
    assert pointer["position"]["stage"] == "classifier_bwd"
    # (and each classifier's linear probe, whose figures metrics.json reports: trainer.classification.probe)
    # the encoder the backward probe read rides along until the stage ends (stage.confirm_over_probe)
    assert set(last["carry"]) == {
        "classifier",
        "classifier_bwd_best",
        "classifier_probe",
        "classifier_bwd_probe",
        "classifier_bwd_start_encoder",
    }

    proc = trainer(uri, "r1", *args, start_new_session=True)
    sigterm_at(bucket, "r1", proc, "classifier_bwd", 3)
    pointer = json.loads(bucket.read_bytes("fr/runs/r1/checkpoints/LATEST.ckpt.json"))
    assert pointer["position"]["stage"] == "classifier_bwd"
    proc = trainer(uri, "r1", *args)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    log = bucket.read_appended("fr/runs/r1/log.txt")[0].decode()
    for line in (
        "lm_finetune: finished before the interruption",
        "classifier: finished before the interruption",
        "lm_finetune_bwd: finished before the interruption",
        "classifier_bwd: resumed at classifier_bwd",
        "bidirectional: backward macro-F1",
    ):
        assert line in log, line
    assert f"base LM: {inline}" in log and "has no backward LM" not in log
    whole, resumed = (json.loads(bucket.read_bytes(f"fr/runs/{r}/metrics.json")) for r in ("whole", "r1"))
    assert resumed["bidirectional"] is True and resumed["history"][-1]["stage"] == "classifier_bwd"
    for key in ("per_label", "macro_f1", "accuracy", "backward", "ensemble"):
        assert resumed[key] == whole[key], key
    assert whole["ensemble"]["rows"] == whole["rows"]

    # model_bwd.pth predicts plain strings: the exported pipeline reverses the ids, as training did.
    from trainer.runfiles.metrics_file import RunMetrics
    from trainer.serving.served_model import ServedModel, UnservableRun, load_learner_file, load_tfidf

    for name in ("model.pth", "model_bwd.pth"):
        (tmp_path / name).write_bytes(bucket.read_bytes(f"fr/runs/r1/{name}"))
    fwd, bwd = load_learner_file(tmp_path / "model.pth"), load_learner_file(tmp_path / "model_bwd.pth")
    text = "Le colis n'est jamais arrivé"
    ids = [learn.dls.test_dl([text]).one_batch()[0][0].tolist() for learn in (fwd, bwd)]
    assert ids[1] == ids[0][::-1] and ids[0][0] == fwd.dls.vocab[0].index("xxbos")

    # The models' own probabilities (the blend aside): the ensemble averages the two.
    def served(learn, metrics, **parts):  # the text's labels and {label: probability}
        model = ServedModel(metrics=metrics, learn=learn, **parts)
        [labels], [row] = model.predict([text])
        return labels, dict(zip(model.labels, row.tolist()))

    raw = RunMetrics.from_document({**resumed, "kept": "classifier"})
    labels, probs = served(fwd, raw, learn_bwd=bwd)
    _, fwd_probs = served(fwd, raw)
    _, bwd_probs = served(bwd, raw)
    assert probs == pytest.approx({k: (fwd_probs[k] + bwd_probs[k]) / 2 for k in probs}) and labels
    # The tiny models are far below TF-IDF on this sample, so the run kept the blend of the ensemble with it:
    # predict serves that, and refuses the forward model alone (never scored in that blend).
    assert resumed["kept"] == "blend" and resumed["classifier"]["macro_f1"] == resumed["ensemble"]["macro_f1"]
    typed = RunMetrics.from_document(resumed)
    tfidf = load_tfidf(*(bucket.read_bytes(f"fr/runs/r1/{n}") for n in ("tfidf.json", "tfidf.npz")))
    _, kept = served(fwd, typed, learn_bwd=bwd, tfidf=tfidf)
    w, tf = typed.blend_weight, tfidf.probabilities([text])[0]
    assert kept == pytest.approx({k: w * probs[k] + (1 - w) * tf[i] for i, k in enumerate(typed.labels)})
    if typed.tfidf_alone:  # a blend that weighs the classifier 0 serves TF-IDF alone, with or without it
        assert served(fwd, typed, tfidf=tfidf)[1] == pytest.approx(kept)
    else:
        with pytest.raises(UnservableRun, match="never scored in that blend"):
            served(fwd, typed, tfidf=tfidf)

    # trainctl predict serves the kept blend of the ensemble, and refuses --forward-only for it
    from typer.testing import CliRunner

    from stacks.cli.main import app

    runner = CliRunner()
    both = runner.invoke(app, ["predict", "fr", text, "--run", "r1", "--set", f"bucket={uri}"])
    alone = runner.invoke(app, ["predict", "fr", text, "--run", "r1", "--set", f"bucket={uri}", "--forward-only"])
    assert both.exit_code == 0, both.output
    shown = lambda p: ", ".join(f"{k} {v:.2f}" for k, v in p.items())  # noqa: E731 (predict's own format)
    assert shown(kept) in " ".join(both.output.split())
    if typed.tfidf_alone:  # neither classifier is loaded: --forward-only changes nothing
        assert alone.exit_code == 0 and shown(kept) in " ".join(alone.output.split()), alone.output
    else:
        assert "forward+backward ensemble" in both.output
        assert alone.exit_code == 2 and "never scored in that blend" in " ".join(alone.output.split()), alone.output


def test_pretrain_publishes_a_backward_lm_and_resumes_it(tmp_path):
    uri = f"file://{tmp_path / 'bucket'}"
    bucket = open_bucket(uri)
    stage_sample(bucket)

    def pretrain(run_id, *extra, **popen):
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainer",
                "--lang",
                "fr",
                "--bucket",
                uri,
                "--run-id",
                run_id,
                "--job",
                "pretrain-lm",
                *TINY_TRAINER_ARGS,
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            **popen,
        )

    def finish(proc):
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out

    finish(pretrain("fwd"))
    forward_only = json.loads(bucket.read_bytes("fr/lm/CURRENT"))["id"]
    args = (*BIDIRECTIONAL, "--epochs-base-lm", "5", "--checkpoint-minutes", "0")
    finish(pretrain("whole", *args))
    both = json.loads(bucket.read_bytes("fr/lm/CURRENT"))["id"]
    meta = json.loads(bucket.read_bytes(f"fr/lm/{both}/meta.json"))
    assert both != forward_only and meta["backward"] is True and meta["backward_perplexity"] > 1
    assert bucket.exists(f"fr/lm/{both}/weights_bwd.pth") and not bucket.exists(f"fr/lm/{forward_only}/weights_bwd.pth")

    proc = pretrain("r1", *args, start_new_session=True)
    sigterm_at(bucket, "r1", proc, "base_lm_bwd", 2)
    finish(pretrain("r1", *args))
    whole, resumed = (json.loads(bucket.read_bytes(f"fr/runs/{r}/metrics.json")) for r in ("whole", "r1"))
    assert resumed["base_lm"]["id"] == both  # the same inputs: the same id, published once
    # Exact resume inside a language model's epoch: the LSTM's hidden state runs on from batch to
    # batch (kept in the checkpoint) and the documents' order is drawn afresh each epoch.
    # the smoothed loss restarts; tokens/s is the clock's
    strip = lambda h: [{k: v for k, v in e.items() if k not in ("train_loss", "tokens_per_s")} for e in h]  # noqa: E731
    assert strip(resumed["history"]) == strip(whole["history"])
    assert (resumed["perplexity"], resumed["backward_perplexity"]) == (
        whole["perplexity"],
        whole["backward_perplexity"],
    )
    assert "base_lm: finished before the interruption" in bucket.read_appended("fr/runs/r1/log.txt")[0].decode()
    # A kill leaves no checkpoint of its own: the run resumes from the last epoch's, where the LM's
    # hidden state starts afresh as in the uninterrupted run.
    proc = pretrain("r2", *args)
    wait_status(bucket, "r2", lambda s: s["stage"] == "base_lm_bwd" and s["epoch"] >= 2, proc)
    proc.kill()
    proc.communicate(timeout=60)
    finish(pretrain("r2", *args))
    killed = json.loads(bucket.read_bytes("fr/runs/r2/metrics.json"))
    assert strip(killed["history"]) == strip(whole["history"])

    # A bidirectional run on a forward-only base LM: the backward LM starts from random weights, and says so.
    proc = trainer(uri, "t1", *BIDIRECTIONAL, "--base-lm", forward_only)
    finish(proc)
    log = bucket.read_appended("fr/runs/t1/log.txt")[0].decode()
    assert f"base LM {forward_only} has no backward LM" in log
    assert json.loads(bucket.read_bytes("fr/runs/t1/metrics.json"))["ensemble"]["macro_f1"] >= 0
