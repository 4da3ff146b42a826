"""`trainctl lm pretrain` on `local`: the training lifecycle, a published base LM, CURRENT, reuse.

A tiny LM on the French sample corpus; then a training run (trainer.base_lm: current) fine-tunes
from it and records it; a changed corpus gives a new id and leaves the first one as it was.
"""

from __future__ import annotations

import json

from tests.support.project import SAMPLE, TINY_SETS
from tests.support.trainctl import assert_nothing_left, trainctl

CURRENT = ["--set", "defaults.trainer.base_lm=current"]  # local.yaml pretrains inline; here CURRENT must be used


def lm_dir(project):
    return project / ".trainstack/local/bucket/fr/lm"


def test_pretrain_publishes_current_and_a_training_run_uses_it(staged, tmp_path):
    import re

    # a full-softmax LM, as every LM published before trainer.lm_head existed
    r = trainctl(
        staged,
        "lm",
        "pretrain",
        "fr",
        *TINY_SETS,
        "--set",
        "defaults.trainer.progress_seconds=0",
        "--set",
        "defaults.trainer.lm_head=full",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert_nothing_left(staged)
    # inside the epoch: batch, tokens/s and ETA lines (status.json carried them; gone once the run ended)
    progress = re.findall(r"base_lm epoch 1/1: batch (\d+)/(\d+) \(\d+%\), [\d,]+ tokens/s, epoch ETA \d+", r.stdout)
    # every batch after the first (whose duration the rates cannot know yet)
    assert len(progress) >= 3 and [int(b) for b, _ in progress] == list(range(2, len(progress) + 2))
    [run_dir] = (staged / ".trainstack/local/bucket/fr/runs").iterdir()
    assert json.loads((run_dir / "status.json").read_text())["progress"] is None
    first = json.loads((lm_dir(staged) / "CURRENT").read_text())["id"]
    assert first.startswith("pt-") and f"base LM {first}: held-out perplexity" in r.stdout
    meta = json.loads((lm_dir(staged) / first / "meta.json").read_text())
    assert meta["source"] == "pretrain" and meta["tokens"] > 0 and meta["perplexity"] > 1
    assert meta["tokenizer"].startswith("fastai-spacy-blank-fr") and meta["corpus_hash"]
    weights = (lm_dir(staged) / first / "weights.pth").read_bytes()

    listing = trainctl(staged, "lm", "list", "fr", "--json")
    assert listing.returncode == 0, listing.stdout + listing.stderr
    [row] = json.loads(listing.stdout)
    assert row["id"] == first and row["current"] and row["small"]

    # fine-tuned under the adaptive softmax (the local default): the old LM's encoder carries over, the
    # head scores words against its matched embedding
    r = trainctl(staged, "train", "fr", *TINY_SETS, *CURRENT, "--set", "defaults.trainer.lm_head=adaptive")
    assert r.returncode == 0, r.stdout + r.stderr
    runs = sorted((staged / ".trainstack/local/bucket/fr/runs").iterdir())
    metrics = json.loads((runs[-1] / "metrics.json").read_text())
    assert metrics["base_lm"]["id"] == first and metrics["base_lm"]["small"] is True
    trainer_meta = json.loads((runs[-1] / "metadata/trainer.json").read_text())
    assert trainer_meta["base_lm"]["meta_sha256"] == metrics["base_lm"]["meta_sha256"]
    log = (runs[-1] / "log.txt").read_text()
    assert f"base LM: {first}" in log and "found an embedding in base LM" in log and "LM head: adaptive" in log
    assert "small base LM: expect weak transfer" in r.stdout  # the printed table says it too

    # Another corpus: a new id, CURRENT moves, the first LM is untouched.
    more = tmp_path / "more"
    (more / "corpus").mkdir(parents=True)
    (more / "corpus" / "extra.txt").write_text("une phrase de plus pour le corpus\nencore une autre\n" * 20)
    assert trainctl(staged, "data", "push", "fr", str(more)).returncode == 0
    r = trainctl(staged, "lm", "pretrain", "fr", *TINY_SETS)
    assert r.returncode == 0, r.stdout + r.stderr
    second = json.loads((lm_dir(staged) / "CURRENT").read_text())["id"]
    assert second != first and (lm_dir(staged) / first / "weights.pth").read_bytes() == weights
    assert trainctl(staged, "lm", "use", "fr", first).returncode == 0
    assert json.loads((lm_dir(staged) / "CURRENT").read_text())["id"] == first


def test_pretrain_without_a_corpus_stops_before_apply(project, tmp_path):
    (tmp_path / "train.csv").write_bytes((SAMPLE / "fr" / "train.csv").read_bytes())
    assert trainctl(project, "data", "push", "fr", str(tmp_path / "train.csv")).returncode == 0
    r = trainctl(project, "lm", "pretrain", "fr")
    assert r.returncode == 2 and "no corpus at" in r.stdout + r.stderr
    assert not (project / ".trainstack/local/state/train-fr.tfstate").exists()


def test_a_sentencepiece_base_lm_brings_its_tokenizer_to_training_runs(tmp_path):
    """ja: `pretrain-lm` trains a SentencePiece model on the corpus and publishes it with the LM;
    a training run then tokenizes with that model (its embeddings only transfer with it)."""
    import subprocess
    import sys

    from tests.support.project import TINY_TRAINER_ARGS
    from trainer.storage import open_bucket

    uri = f"file://{tmp_path / 'bucket'}"
    bucket = open_bucket(uri)
    bucket.upload(SAMPLE / "ja" / "train.csv", "ja/data/train.csv")
    texts = (SAMPLE / "ja" / "train.csv").read_text(encoding="utf-8").splitlines()[1:]
    bucket.write_bytes("ja/data/corpus/web.txt", "\n".join(t.rsplit(",", 1)[0] for t in texts * 3).encode())
    common = [
        sys.executable,
        "-m",
        "trainer",
        "--lang",
        "ja",
        "--bucket",
        uri,
        *TINY_TRAINER_ARGS,
        "--sp-vocab-size",
        "300",
    ]
    done = subprocess.run(
        [*common, "--run-id", "p1", "--job", "pretrain-lm"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lm_id = json.loads(bucket.read_bytes("ja/lm/CURRENT"))["id"]
    meta = json.loads(bucket.read_bytes(f"ja/lm/{lm_id}/meta.json"))
    assert meta["tokenizer"].startswith("sentencepiece-") and bucket.exists(f"ja/lm/{lm_id}/spm.model")
    done = subprocess.run([*common, "--run-id", "t1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    metrics = json.loads(bucket.read_bytes("ja/runs/t1/metrics.json"))
    assert metrics["tokenizer"] == meta["tokenizer"] and metrics["base_lm"]["id"] == lm_id
    assert "the base LM's" in bucket.read_appended("ja/runs/t1/log.txt")[0].decode()


def test_pretrain_while_a_training_run_is_active_follows_that_run_and_says_so(staged):
    r = trainctl(staged, "train", "fr", *TINY_SETS, "--detach")
    assert r.returncode == 0, r.stdout + r.stderr
    r = trainctl(staged, "lm", "pretrain", "fr", *TINY_SETS)
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 0, out
    assert "was a classifier run, already active" in out and "macro-F1" in out  # its own result, not an LM's
    assert not (lm_dir(staged) / "CURRENT").exists()
    assert_nothing_left(staged)
