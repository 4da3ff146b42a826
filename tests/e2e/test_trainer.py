"""The trainer on its own: gs:// through the emulator, determinism, resume after SIGTERM."""

from __future__ import annotations

import json

import pytest

from tests.support.project import SAMPLE
from tests.support.trainer_proc import sigterm_at, stage_sample, trainer
from trainer.storage import open_bucket


def test_trainer_on_gcs_bucket_and_same_seed_same_metrics(gcs_env, gcs_proxy, tmp_path, monkeypatch):
    """Run b also meets storage faults: three 503s on its model.pth upload, its first checkpoint's
    answer cut, a 429 on a log piece; retried under the policy, it gets run a's figures all the same."""
    uri = f"gs://test-bucket/{tmp_path.name}"
    bucket = open_bucket(uri)
    stage_sample(bucket)
    monkeypatch.setenv("TRAINSTACK_STORAGE_BACKOFF_S", "0.1")
    outs = {}
    for run_id in ("a", "b"):
        if run_id == "b":
            gcs_proxy.add("status", r"@.*/runs/b/model\.pth$", times=3, status=503)
            gcs_proxy.add("cut", r"^POST .*@.*/runs/b/checkpoints/000001-")
            gcs_proxy.add("status", r"^POST .*@.*/runs/b/log\.txt\.parts/", times=1, status=429)
        proc = trainer(uri, run_id, "--base-lm", "pretrain-inline")
        outs[run_id], _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, outs[run_id]
    assert [f.hits for f in gcs_proxy.faults] == [3, 1, 1]
    assert outs["b"].count("storage: upload") == 3 and "model.pth: 503" in outs["b"]
    metrics = [json.loads(bucket.read_bytes(f"fr/runs/{r}/metrics.json")) for r in ("a", "b")]
    keys = ("per_label", "micro_f1", "macro_f1", "accuracy")
    assert {k: metrics[0][k] for k in keys} == {k: metrics[1][k] for k in keys}
    # Run a pretrained a base LM on its training rows and published it (never as CURRENT: it saw
    # those rows); run b, on the same rows, fine-tuned from it and reused the token cache.
    assert not bucket.exists("fr/lm/CURRENT")
    [inline] = {k.split("/")[2] for k in bucket.list("fr/lm/")}
    assert inline.startswith("inline-") and bucket.exists(f"fr/lm/{inline}/meta.json")
    assert metrics[0]["base_lm"]["id"] == metrics[1]["base_lm"]["id"] == inline
    assert metrics[1]["base_lm"]["small"] is True
    log_a, log_b = (bucket.read_appended(f"fr/runs/{r}/log.txt")[0].decode() for r in ("a", "b"))
    assert log_b.count("storage: upload") == 3  # each retry in the run log, once
    assert f"base LM: published {inline}" in log_a
    assert f"base LM: {inline}" in log_b and "on the same training rows" in log_b and "tokens: reused cache" in log_b
    assert "small base LM: expect weak transfer" in log_b and "found an embedding in base LM" in log_b
    assert json.loads(bucket.read_bytes("fr/runs/b/status.json"))["state"] == "SUCCEEDED"
    # A finished run is never overwritten.
    proc = trainer(uri, "a")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "already ended" in out


def test_sigterm_mid_classifier_resumes_exactly(tmp_path):
    """Interrupted-then-resumed equals uninterrupted on CPU with a fixed seed (mid-epoch position,
    RNG states, optimizer and history are all in the checkpoint)."""
    uri = f"file://{tmp_path / 'bucket'}"
    bucket = open_bucket(uri)
    stage_sample(bucket)
    # epochs enough for an interruption point at epoch 3 with room to spare, no more (the suite's time)
    args = ("--epochs-clf", "8", "--checkpoint-minutes", "0")
    proc = trainer(uri, "whole", *args)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    # progress after every batch (logging only): the interruption must not leave it behind
    proc = trainer(uri, "r1", *args, "--progress-seconds", "0", start_new_session=True)
    sigterm_at(bucket, "r1", proc, "classifier", 3)
    status = json.loads(bucket.read_bytes("fr/runs/r1/status.json"))
    assert status["state"] == "RUNNING" and status["stage"] == "interrupted" and status["progress"] is None
    # TensorBoard of a run not finished: the epochs so far, every stage so far, at the run's global epoch
    # (TensorBoard's own loader).
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    seen = EventAccumulator(str(tmp_path / "bucket/fr/runs/r1/tensorboard")).Reload()
    sections = {tag.split("/")[0] for tag in seen.Tags()["scalars"]}
    assert sections == {"classifier", "lm_finetune"}  # r1 reused whole's base LM
    lm_epochs = len(seen.Scalars("lm_finetune/valid_loss"))
    steps = [e.step for e in seen.Scalars("classifier/valid_loss")]
    assert steps == list(range(lm_epochs + 1, lm_epochs + len(steps) + 1)) and 3 <= len(steps) < 8
    pointer = json.loads(bucket.read_bytes("fr/runs/r1/checkpoints/LATEST.ckpt.json"))
    assert pointer["position"]["stage"] == "classifier" and pointer["key"].endswith("-classifier.ckpt.pt")
    # One object per save, the newest 3 kept.
    assert len([k for k in bucket.list("fr/runs/r1/checkpoints/") if k.endswith(".ckpt.pt")]) == 3
    proc = trainer(uri, "r1", *args)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    status = json.loads(bucket.read_bytes("fr/runs/r1/status.json"))
    assert status["state"] == "SUCCEEDED" and status["resumed"] == 1
    log = bucket.read_appended("fr/runs/r1/log.txt")[0].decode()
    assert "lm_finetune: finished before the interruption" in log and "classifier: resumed at classifier" in log
    whole, resumed = (json.loads(bucket.read_bytes(f"fr/runs/{r}/metrics.json")) for r in ("whole", "r1"))
    assert resumed["history"][-1]["stage"] == "classifier" and resumed["history"][-1]["epoch"] == 8
    # Every epoch survives the interruption, with the same validation figures ("whole" also
    # pretrained the base LM that r1 reused; a resumed epoch's train_loss covers its own batches, its tokens/s
    # the clock's).
    clocked = ("train_loss", "tokens_per_s")
    strip = lambda h: [{k: v for k, v in e.items() if k not in clocked} for e in h if e["stage"] != "base_lm"]  # noqa: E731
    assert strip(resumed["history"]) == strip(whole["history"])
    for key in ("per_label", "micro_f1", "macro_f1", "accuracy"):
        assert resumed[key] == whole[key], key


def test_test_split_scores_test_rows_with_thresholds_tuned_on_valid_rows(tmp_path):
    import csv
    import io

    import numpy as np

    from trainer.classification import metrics as M

    uri = f"file://{tmp_path / 'bucket'}"
    bucket = open_bucket(uri)
    lines = (SAMPLE / "fr/train.csv").read_text().splitlines()
    bucket.write_bytes("fr/data/train.csv", ("\n".join(lines[:301]) + "\n").encode())
    bucket.write_bytes("fr/data/test.csv", ("\n".join(lines[:1] + lines[301:]) + "\n").encode())
    proc = trainer(uri, "t1")
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    m = json.loads(bucket.read_bytes("fr/runs/t1/metrics.json"))
    assert m["rows"] == {"fit": "train", "thresholds": "valid", "scores": "test"} and m["n_test"] == 80
    assert m["baseline_tfidf"]["rows"]["scores"] == "test" and m["valid"]["rows"]["scores"] == "valid"

    def table(name):
        rows = list(csv.DictReader(io.StringIO(bucket.read_bytes(f"fr/runs/t1/{name}").decode())))
        probs = np.array([[float(r[f"prob_{l}"]) for l in m["labels"]] for r in rows])
        targets = np.array([[int(l in r["true_labels"].split(";")) for l in m["labels"]] for r in rows])
        return rows, probs, targets

    valid_rows, valid_probs, valid_targets = table("valid_predictions.csv")
    test_rows, test_probs, test_targets = table("test_predictions.csv")
    assert {r["split"] for r in valid_rows} == {"valid"} and {r["split"] for r in test_rows} == {"test"}
    assert len(test_rows) == 80
    # The thresholds are the ones the validation rows give, never the test rows'.
    thresholds = M.choose_thresholds(valid_probs, valid_targets)
    assert [m["per_label"][l]["threshold"] for l in m["labels"]] == thresholds.tolist()
    # The reported figures are recomputed from test_predictions.csv with those thresholds.
    recomputed = M.score(
        M.decide(test_probs, multi_label=True, thresholds=thresholds), test_targets, m["labels"], thresholds
    )
    assert recomputed["macro_f1"] == m["macro_f1"] and recomputed["per_label"] == m["per_label"]
    # What was kept, beside the classifier alone and the best blend, on the same rows. The tiny classifier
    # (2 epochs, 64 hidden units) is far below TF-IDF on this sample (n-grams score ~0.98), so the blend wins
    # on the validation rows and is kept.
    assert m["kept"] == "blend" and 0.0 <= m["blend"]["weight"] < 1.0
    assert m["blend"]["macro_f1"] == m["macro_f1"] and m["classifier"]["macro_f1"] < m["macro_f1"]
    assert m["classifier"]["rows"] == m["blend"]["rows"] == m["baseline_tfidf"]["rows"] == m["rows"]
    assert m["selection"]["rows"] == "valid" and m["selection"]["blend"] < m["selection"]["classifier"]  # log loss
    # epoch 0 is the linear probe the head started from (trainer.probe_head); its own figures sit beside
    if m["best_epoch"]["of"]:
        assert m["best_epoch"]["of"] == 2 and m["best_epoch"]["epoch"] in (0, 1, 2)
    else:  # fewer than trainer.min_valid_rows validation rows: the probe's head, no fine-tuning
        assert m["n_valid"] < 50 and m["best_epoch"]["epoch"] == 0
    assert m["probe"]["rows"]["scores"] == "test" and 0 < m["probe"]["macro_f1"] <= 1
    if m["best_epoch"]["epoch"] == 0:
        assert abs(m["probe"]["macro_f1"] - m["classifier"]["macro_f1"]) <= 0.02  # the same model, two code paths
    assert {f"model_prob_{l}" for l in m["labels"]} <= set(test_rows[0])
    # predict serves the kept blend: model.pth's probabilities mixed with tfidf.json/tfidf.npz's reproduce the
    # scored rows' probabilities.
    from trainer.serving.served_model import ServedModel, UnservableRun

    for name in ("model.pth", "metrics.json", "tfidf.json", "tfidf.npz"):
        bucket.download(f"fr/runs/t1/{name}", tmp_path / name)
    served = ServedModel.from_folder(tmp_path)
    chosen, probs = served.predict([r["text"] for r in test_rows[:8]])
    assert served.labels == m["labels"]
    for labels, row_probs, row, expected in zip(chosen, probs, test_rows, test_probs):
        np.testing.assert_allclose(row_probs, expected, atol=2e-3)
        assert set(labels) == set(filter(None, row["pred_labels"].split(";")))
    with pytest.raises(UnservableRun, match="tfidf.json/tfidf.npz are missing"):
        ServedModel(metrics=served.metrics, learn=served.learn)
