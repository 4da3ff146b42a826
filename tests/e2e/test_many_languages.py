"""Several languages in one command, end to end on `local`: one summary, a failure of its own, reports,
the promoted model serving a whole file."""
from __future__ import annotations

import csv
import json

from tests.support.html_page import parse
from tests.support.project import SAMPLE, TINY_SETS
from tests.support.trainctl import assert_nothing_left, only_run, run_dir, trainctl


def test_train_two_languages_and_a_bad_one(staged, tmp_path):
    r = trainctl(staged, "data", "push", "en", str(SAMPLE / "en"))
    assert r.returncode == 0, r.stdout + r.stderr
    r = trainctl(staged, "train", "fr", "xx", "en", "--promote-if-better", *TINY_SETS, timeout=600)
    assert r.returncode == 2, r.stdout + r.stderr  # xx is not configured: its own error, the others ran
    out = r.stdout
    assert "[xx] error: language 'xx' is not configured" in out
    fr, en = only_run(staged, "fr"), only_run(staged, "en")
    summary = out[out.index("3 language(s), env local"):].splitlines()
    assert summary[1].split("\t") == ["lang", "state", "run", "macro-F1", "TF-IDF", "Δ", "duration", "est. cost",
                                      "promoted"]
    rows = {line.split("\t")[0]: line.split("\t") for line in summary[2:5]}
    assert rows["fr"][1:3] == ["SUCCEEDED", fr] and rows["en"][1:3] == ["SUCCEEDED", en] and rows["xx"][1] == "ERROR"
    metrics = json.loads((run_dir(staged, "fr", fr) / "metrics.json").read_text())
    assert rows["fr"][3] == f"{metrics['macro_f1']:.3f}" and rows["fr"][8] == "yes"  # nothing promoted before
    assert_nothing_left(staged, "fr")
    assert_nothing_left(staged, "en")
    # Each run folder has its report, with the cost recorded after the stack was destroyed.
    for lang, run_id in (("fr", fr), ("en", en)):
        page = parse((run_dir(staged, lang, run_id) / "report.html").read_bytes())
        assert len(page.images) >= 2 and all(src.startswith("data:image/png;base64,") for src in page.images)
        assert "Per label, against both baselines" in page.headings and "est_cost" in page.cells
    written = tmp_path / "fr.html"
    r = trainctl(staged, "runs", "show", fr, "--report", str(written))
    assert r.returncode == 0 and parse(written.read_bytes()).headings
    # The promoted model classifies a whole file, beside each row's id.
    texts = tmp_path / "texts.csv"
    with open(SAMPLE / "fr" / "train.csv", newline="") as src, open(texts, "w", newline="") as dst:
        reader = csv.DictReader(src)
        writer = csv.writer(dst)
        writer.writerow(["id", "message"])
        for i, row in enumerate(reader):
            writer.writerow([f"m{i}", row["text"]])
    out_file = tmp_path / "labels.jsonl"
    r = trainctl(staged, "predict", "fr", "--input", str(texts), "--output", str(out_file), "--text-col", "message",
                 "--batch-rows", "100")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"380 rows classified by run {fr}" in r.stdout
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(lines) == 380 and lines[0]["id"] == "m0"
    assert set(lines[0]) == {"id", "labels", *(f"prob_{label}" for label in metrics["labels"])}
    r = trainctl(staged, "predict", "fr", "--input", str(texts), "--output", str(out_file), "--text-col", "message")
    assert r.returncode == 2 and "exists" in r.stderr  # never overwritten
