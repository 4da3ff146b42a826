"""Japanese, Chinese and Greek train end to end (tiny models), from JSON Lines, Parquet and CSV.

ja and zh get a SentencePiece model trained on the run's training rows (the default for
languages without spaces between words); Greek is named `gr` and mapped to its ISO code
`el` for spaCy, and keeps its case markers. The exported model.pth predicts raw strings.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest

from tests.support.project import SAMPLE, TINY_TRAINER_ARGS
from trainer.storage import open_bucket


def _rows(lang: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO((SAMPLE / lang / "train.csv").read_text(encoding="utf-8"))))


def _stage(bucket, key: str, lang: str) -> list[str]:
    """The sample in another format; returns the extra trainer flags it needs."""
    rows = _rows(lang)
    if key == "ja":  # JSON Lines, labels as JSON lists
        body = "".join(
            json.dumps({"text": r["text"], "labels": [r["labels"]]}, ensure_ascii=False) + "\n" for r in rows
        )
        bucket.write_bytes("ja/data/train.jsonl", body.encode())
        return []
    if key == "zh":  # Parquet, one 0/1 column per label
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = sorted({r["labels"] for r in rows})
        buf = io.BytesIO()
        pq.write_table(
            pa.Table.from_pylist([{"body": r["text"], **{n: int(r["labels"] == n) for n in names}} for r in rows]), buf
        )
        bucket.write_bytes("zh/data/train.parquet", buf.getvalue())
        return ["--text-col", "body", *(arg for n in names for arg in ("--label-cols", n))]
    bucket.upload(SAMPLE / lang / "train.csv", f"{key}/data/train.csv")
    return ["--lang-code", lang]


@pytest.mark.parametrize(
    "key, lang, tokenizer",
    [("ja", "ja", "sentencepiece-"), ("zh", "zh", "sentencepiece-"), ("gr", "el", "fastai-spacy-blank-el-")],
)
def test_a_language_trains_end_to_end_and_its_model_predicts_strings(tmp_path, key, lang, tokenizer):
    from trainer.serving.served_model import ServedModel

    uri = f"file://{tmp_path / 'bucket'}"
    bucket = open_bucket(uri)
    extra = _stage(bucket, key, lang)
    cwd, scratch = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    scratch.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--lang",
            key,
            "--bucket",
            uri,
            "--run-id",
            "r1",
            *TINY_TRAINER_ARGS,
            "--sp-vocab-size",
            "400",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(cwd.iterdir()), "the trainer wrote into its working directory"
    assert not list(scratch.iterdir()), "the trainer left its scratch folder behind"
    metrics = json.loads(bucket.read_bytes(f"{key}/runs/r1/metrics.json"))
    assert metrics["tokenizer"].startswith(tokenizer)
    assert metrics["labels"] == ["account", "billing", "delivery"]
    assert metrics["baseline_tfidf"]["macro_f1"] > 0.9  # the fragments are distinct: a sanity bar for the data
    log = bucket.read_appended(f"{key}/runs/r1/log.txt")[0].decode()
    assert "tokenizer:" in log
    # what the run kept: the classifier, or its blend with the TF-IDF part saved beside model.pth
    for name in ("model.pth", "metrics.json", "tfidf.json", "tfidf.npz"):
        if bucket.exists(f"{key}/runs/r1/{name}"):
            (tmp_path / name).write_bytes(bucket.read_bytes(f"{key}/runs/r1/{name}"))
    model = ServedModel.from_folder(tmp_path)
    learn = model.learn
    [labels], probs = model.predict([_rows(lang)[0]["text"]])
    assert len(labels) == 1 and probs.shape == (1, 3) and model.labels == metrics["labels"]
    if key == "gr":  # Greek capitals keep their markers through the exported pipeline
        from fastai.text.all import Tokenizer

        tok = next(t for t in learn.dls.train_ds.tls[0].tfms.fs if isinstance(t, Tokenizer))
        assert list(tok("Η Παραγγελία ΚΛΕΙΔΩΘΗΚΕ")) == ["xxbos", "η", "xxmaj", "παραγγελία", "xxup", "κλειδωθηκε"]


def test_real_japanese_rows_pass_the_preflight_and_train(project):
    """Real Japanese prose (the shared corpus) as labelled rows: dialogue (「…」) or narration.
    `trainctl train` runs the preflight first; it refused such data before."""
    from typer.testing import CliRunner

    from stacks.cli.main import app
    from tests.support.project import TINY_SETS, corpus_lines

    lines = corpus_lines("ja", 3000, min_chars=8)
    dialogue = [t for t in lines if t.startswith("「")][:60]
    narration = [t for t in lines if not t.startswith("「")][:60]
    assert len(dialogue) == len(narration) == 60
    rows = [{"text": t, "labels": "dialogue"} for t in dialogue] + [
        {"text": t, "labels": "narration"} for t in narration
    ]
    data = project / "ja-data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    runner = CliRunner()
    push = runner.invoke(app, ["data", "push", "ja", str(data), "--set", "languages.ja={}"])
    assert push.exit_code == 0, push.output
    result = runner.invoke(
        app, ["train", "ja", "--set", "languages.ja={}", *TINY_SETS, "--set", "defaults.trainer.sp_vocab_size=400"]
    )
    assert result.exit_code == 0, result.output
    bucket = open_bucket(f"file://{project / '.trainstack/local/bucket'}")
    [run_id] = [k.split("/")[2] for k in bucket.list("ja/runs/") if k.endswith("/metrics.json")]
    metrics = json.loads(bucket.read_bytes(f"ja/runs/{run_id}/metrics.json"))
    assert metrics["tokenizer"].startswith("sentencepiece-") and metrics["labels"] == ["dialogue", "narration"]
