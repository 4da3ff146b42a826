"""Unlabelled in-domain texts (`<lang>/data/unlabelled.*`): staged by `data push`, read by LM fine-tuning
beside the training rows, never a validation or test text, counted in metrics.json."""

from __future__ import annotations

import csv
import gzip
import io
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from tests.support.project import SAMPLE, TINY_TRAINER_ARGS
from trainer.data.labelled import unlabelled_texts
from trainer.errors import DataError
from trainer.storage import open_bucket

runner = CliRunner()


def test_unlabelled_texts_of_every_format():
    lines = ["premier texte", "", "  second texte  "]
    plain = "\n".join(lines).encode()
    assert unlabelled_texts(plain, "unlabelled.txt", text_col="text", source="s") == ["premier texte", "second texte"]
    assert unlabelled_texts(gzip.compress(plain), "unlabelled.txt.gz", text_col="text", source="s") == [
        "premier texte",
        "second texte",
    ]
    table = b"body,other\npremier texte,1\n,2\nsecond texte,3\n"
    assert unlabelled_texts(table, "unlabelled.csv", text_col="body", source="s") == ["premier texte", "second texte"]
    jsonl = b'{"body": "premier texte"}\n{"body": null}\n'
    assert unlabelled_texts(jsonl, "unlabelled.jsonl", text_col="body", source="s") == ["premier texte"]
    with pytest.raises(DataError, match="has no text column 'text' \\(columns: body, other\\)"):
        unlabelled_texts(table, "unlabelled.csv", text_col="text", source="s")
    with pytest.raises(DataError, match="not a readable gzip file"):
        unlabelled_texts(b"not gzip", "unlabelled.txt.gz", text_col="text", source="s")


def test_data_push_stages_unlabelled_texts_and_never_overwrites_them(project, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.csv").write_bytes((SAMPLE / "fr" / "train.csv").read_bytes())
    (folder / "unlabelled.txt").write_text("mon colis est perdu\nma facture est fausse\n", encoding="utf-8")
    r = runner.invoke(app, ["data", "push", "fr", str(folder)])
    assert r.exit_code == 0, r.output
    assert "2 unlabelled texts (LM fine-tuning only, never scored)" in r.output
    staged = project / ".trainstack/local/bucket/fr/data/unlabelled.txt"
    assert staged.read_bytes() == (folder / "unlabelled.txt").read_bytes()

    other = tmp_path / "unlabelled.csv"
    other.write_text("text\nun autre texte\n", encoding="utf-8")
    r = runner.invoke(app, ["data", "push", "fr", str(other)])
    assert r.exit_code == 2 and "unlabelled.txt" in r.output and "--replace" in r.output
    assert staged.exists() and not staged.with_suffix(".csv").exists()
    r = runner.invoke(app, ["data", "push", "fr", str(other), "--replace"])
    assert r.exit_code == 0, r.output
    assert not staged.exists() and staged.with_suffix(".csv").exists()
    assert len(list((project / ".trainstack/local/bucket/fr/data/previous").glob("*/data/unlabelled.txt"))) == 1

    empty = tmp_path / "empty" / "unlabelled.csv"
    empty.parent.mkdir()
    empty.write_text("text\n\n", encoding="utf-8")
    r = runner.invoke(app, ["data", "push", "fr", str(empty), "--replace"])
    assert r.exit_code == 2 and "holds no text" in r.output


def test_lm_fine_tuning_reads_unlabelled_texts_but_never_a_held_out_one(tmp_path):
    rows = list(csv.DictReader(io.StringIO((SAMPLE / "fr" / "train.csv").read_text(encoding="utf-8"))))
    train, valid = rows[:300], rows[300:]
    uri = f"file://{tmp_path / 'bucket'}"
    bucket = open_bucket(uri)
    for name, part in (("train", train), ("valid", valid)):
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=["text", "labels"])
        writer.writeheader()
        writer.writerows(part)
        bucket.write_bytes(f"fr/data/{name}.csv", buf.getvalue().encode())
    # A word only the unlabelled texts hold reaches the vocabulary; one only a validation text holds never does.
    held_out = valid[0]["text"] + " quuxvalide"
    bucket.write_bytes(
        f"fr/data/{'valid'}.csv",
        bucket.read_bytes("fr/data/valid.csv").replace(valid[0]["text"].encode(), held_out.encode(), 1),
    )
    domain = [f"le zorglubique colis numéro {i} est arrivé" for i in range(40)] + [held_out, held_out]
    bucket.write_bytes("fr/data/unlabelled.txt", "\n".join(domain).encode())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--lang",
            "fr",
            "--bucket",
            uri,
            "--run-id",
            "u1",
            *TINY_TRAINER_ARGS,
            "--base-lm",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    metrics = json.loads(bucket.read_bytes("fr/runs/u1/metrics.json"))
    assert metrics["unlabelled"] == {
        "source": bucket.url("fr/runs/u1/data/unlabelled.txt"),  # the run's own copy of the texts
        "texts": 40,
        "tokens": metrics["unlabelled"]["tokens"],
        "dropped_held_out": 2,
        "sampled_from": 0,
    }
    assert metrics["unlabelled"]["tokens"] > 40 * 7
    assert metrics["n_valid"] == len(valid)
    log = bucket.read_appended("fr/runs/u1/log.txt")[0].decode()
    assert "unlabelled: 40 texts" in log and "2 equal to a validation or test text dropped" in log
    # no base LM: only LM fine-tuning (whose vocabulary the classifier keeps) can have read them
    from trainer.serving.served_model import load_learner_file

    (tmp_path / "model.pth").write_bytes(bucket.read_bytes("fr/runs/u1/model.pth"))
    vocab = set(load_learner_file(tmp_path / "model.pth").dls.vocab[0])
    assert "zorglubique" in vocab and "quuxvalide" not in vocab


def test_unlabelled_lines_end_where_corpus_lines_do():
    """U+2028 and U+0085 are text inside a line, as in corpus files (str.splitlines would split there,
    and a held-out text holding one would come back as pieces that match nothing)."""
    raw = "un texte\u2028sur deux lignes\nsuivant\x85encore\r\nfin".encode()
    assert unlabelled_texts(raw, "unlabelled.txt", text_col="text", source="s") == [
        "un texte\u2028sur deux lignes",
        "suivant\x85encore",
        "fin",
    ]


def test_data_push_names_the_spelling_and_checks_before_apply(project, tmp_path):
    typo = tmp_path / "unlabeled.csv"
    typo.write_text("text\nun texte\n", encoding="utf-8")
    r = runner.invoke(app, ["data", "push", "fr", str(typo)])
    assert r.exit_code == 2 and "named unlabelled.*" in r.output
    upper = tmp_path / "x" / "Unlabelled.TXT"
    upper.parent.mkdir()
    upper.write_text("un texte\n", encoding="utf-8")
    assert runner.invoke(app, ["data", "push", "fr", str(upper)]).exit_code == 0
    assert (project / ".trainstack/local/bucket/fr/data/unlabelled.txt").exists()

    # staged by hand without the text column: the preflight stops `train` before apply
    assert runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr" / "train.csv")]).exit_code == 0
    (project / ".trainstack/local/bucket/fr/data/unlabelled.txt").unlink()
    (project / ".trainstack/local/bucket/fr/data/unlabelled.csv").write_text("body\nun texte\n", encoding="utf-8")
    r = runner.invoke(app, ["train", "fr"])
    assert r.exit_code == 2 and "has no text column 'text'" in r.output
    assert not (project / ".trainstack/local/state").exists()


def test_lm_fine_tuning_tokenizes_only_the_seeded_sample_it_reads(tmp_path, monkeypatch):
    """Under trainer.max_lm_tokens only the texts that will be read are tokenized (IMDb: 3 % of 74,837
    reviews were read after all of them had been tokenized, 4.7 min)."""
    from types import SimpleNamespace

    from trainer.lm import domain
    from trainer.text.tokenizers import spacy_spec
    from trainer.text.tokens import TokenIds

    monkeypatch.setattr(domain, "FIRST_CHUNK", 100)
    bucket = open_bucket(f"file://{tmp_path / 'bucket'}")
    texts = [f"le colis numéro {i} est " + "très " * (i % 5) + "en retard" for i in range(1000)]
    bucket.write_bytes("fr/data/unlabelled.txt", "\n".join(texts).encode())
    data, splits = SimpleNamespace(texts=["un texte"]), SimpleNamespace(train=[0], valid=[], test=[])

    def sample(seed: int, budget: int):
        lines = []
        a = SimpleNamespace(lang="fr", text_col="text", max_lm_tokens=budget, seed=seed)
        rc = SimpleNamespace(a=a, bucket=bucket, log=SimpleNamespace(line=lines.append))
        return (*domain.load(rc, data, splits, spacy_spec("fr")), lines)

    def tokenized() -> int:
        return sum(
            len(TokenIds.from_bytes(bucket.read_bytes(k))) for k in bucket.list("fr/cache/") if k.endswith(".npz")
        )

    tokens, info, lines = sample(1, 2000)  # and a tenth more for the LM's validation texts
    assert 2000 < info.tokens <= 2200 and tokens.n_tokens == info.tokens
    assert info.sampled_from == len(texts) and info.texts == len(tokens)
    # a first chunk of 100 texts, then the rest the tokens per text seen so far ask for: not the other ~750
    assert info.texts <= tokenized() < 300
    assert "only the sample was tokenized" in lines[-1]
    again, _, _ = sample(1, 2000)
    assert again == tokens  # the same sample every time (and from the cache)
    other, _, _ = sample(2, 2000)
    assert other != tokens
    whole, info, _ = sample(1, 0)  # no cap: every text, in its order
    assert len(whole) == len(texts) and info.sampled_from == 0


def test_sentencepiece_learns_from_unlabelled_texts_but_never_a_held_out_one(tmp_path):
    from types import SimpleNamespace

    from trainer.lm.domain import for_tokenizer

    bucket = open_bucket(f"file://{tmp_path / 'bucket'}")
    bucket.write_bytes("ja/data/unlabelled.txt", "荷物が届かない\n請求書が違う\n検証の文\n返品したい\n".encode())
    args = SimpleNamespace(lang="ja", text_col="text")
    rc = SimpleNamespace(a=args, bucket=bucket)
    data, splits = SimpleNamespace(texts=["訓練の文", "検証の文"]), SimpleNamespace(train=[0], valid=[1], test=[])
    assert for_tokenizer(rc, data, splits, 1000) == ["荷物が届かない", "請求書が違う", "返品したい"]
    assert for_tokenizer(rc, data, splits, 13) == ["荷物が届かない", "請求書が違う"]  # the character budget holds
    empty = SimpleNamespace(a=args, bucket=open_bucket(f"file://{tmp_path / 'empty'}"))
    assert for_tokenizer(empty, data, splits, 1000) == []
