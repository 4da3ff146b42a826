"""The GPU call (benchmarks/gpu_call.py) as a dry run on the CPU: every step of the call a GPU machine will get,
at tiny sizes, so the one prepared call cannot fail on a typo when a GPU is finally at hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.project import REPO, shared_corpus


def test_the_gpu_call_dry_run_writes_every_step(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gpu_call",
            "--out",
            str(out),
            "--dry-run",
            "--budget-s",
            "400",
            "--steps",
            "env",
            "speed",
            "e2e",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads((out / "gpu_call.json").read_text())
    steps = record["steps"]
    assert record["dry_run"] and record["finished"] and set(steps) == {"env", "e2e", "speed"}
    assert not [name for name, step in steps.items() if "error" in step and step["error"]], steps
    assert steps["env"]["torch"] and "cuda_available" in steps["env"]
    e2e = steps["e2e"]
    assert e2e["rc"] == 0 and e2e["state"] == "SUCCEEDED" and e2e["epochs"] and e2e["precision"]
    assert (out / "e2e" / "metrics.json").is_file() and (out / "e2e" / "log.txt").is_file()
    rows = steps["speed"]["rows"]
    assert {(row["head"], row["precision"]) for row in rows} >= {("full", "fp32"), ("adaptive", "fp32")}
    assert all(row.get("tokens_per_s", 0) > 0 for row in rows if row["precision"] == "fp32")


def test_the_gpu_calls_trainer_alone_where_terraform_is_not(tmp_path):
    """The device machine has no Terraform nor CDK packages: its e2e step runs `python -m trainer` itself."""
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gpu_call",
            "--out",
            str(out),
            "--dry-run",
            "--trainer-only",
            "--steps",
            "env",
            "e2e",
            "--budget-s",
            "300",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    steps = json.loads((out / "gpu_call.json").read_text())["steps"]
    assert set(steps) == {"env", "e2e"}
    e2e = steps["e2e"]
    assert e2e["how"] == "python -m trainer" and e2e["rc"] == 0 and e2e["state"] == "SUCCEEDED", e2e


def test_the_gpu_calls_imdb_step_on_a_carried_subset(tmp_path):
    """What the device machine gets: gpu_pack's subset of ../shared named by TRAINSTACK_SHARED, no Terraform;
    the base LM pretrained by the trainer's own pretrain-lm job, then TF-IDF and the corpus variant."""
    shared_corpus("en")
    subset = tmp_path / "shared"
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from benchmarks.gpu_pack "
            "import subset; subset(Path(sys.argv[1]), test_rows=200, train_rows=400, "
            "unlabelled_rows=300, corpus_bytes=300_000)",
            str(subset),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    assert len((subset / "datasets/en_imdb/test.csv").read_text().splitlines()) > 200  # a header and 200 reviews
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gpu_call",
            "--out",
            str(out),
            "--dry-run",
            "--trainer-only",
            "--steps",
            "env",
            "imdb",
            "--budget-s",
            "300",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "TRAINSTACK_SHARED": str(subset)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    imdb = json.loads((out / "gpu_call.json").read_text())["steps"]["imdb"]
    assert imdb["pretrain"]["rc"] == 0, imdb["pretrain"]
    for variant in ("tfidf", "corpus"):
        assert imdb[variant]["rc"] == 0 and imdb[variant]["cells"], imdb[variant]
    cell = imdb["corpus"]["cells"][0]
    assert cell["n_test"] == 200 and cell["variant"] == "corpus" and 0 <= cell["classifier_accuracy"] <= 1, cell


def test_the_recipe_step_reads_the_perplexity_of_every_published_base_lm():
    """The GPU call picks its best pretrain from the trainer's "published" line, whose words vary with the LM
    (a sample of a larger corpus, another head, a backward LM): built here by the trainer's own describe()."""
    from benchmarks.gpu_call import perplexity_of
    from trainer.lm.store import BaseLM

    arch = {"emb_sz": 400, "n_hid": 1152, "n_layers": 3}
    for lm, ppl in (
        (
            BaseLM("pt-1", "pretrain", "t", arch, 30000, tokens=2_000_000, corpus_tokens=14_716_179, perplexity=525.27),
            525.3,
        ),
        (
            BaseLM(
                "pt-2",
                "pretrain",
                "t",
                arch,
                30000,
                tokens=14_716_179,
                perplexity=276.74,
                head="adaptive",
                backward=True,
                backward_perplexity=300.0,
            ),
            276.7,
        ),
    ):
        assert perplexity_of(f"2026-11-27T18:20:20Z base LM: published {lm.describe()} to file:///b\n") == ppl
    assert perplexity_of("base_lm [1/1] epoch 1/1 perplexity 522.1\n") is None
