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
    summary = out[out.index("3 language(s), env local") :].splitlines()
    assert summary[1].split("\t") == [
        "lang",
        "state",
        "run",
        "macro-F1",
        "TF-IDF",
        "Δ",
        "duration",
        "est. cost",
        "promoted",
    ]
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
    r = trainctl(
        staged,
        "predict",
        "fr",
        "--input",
        str(texts),
        "--output",
        str(out_file),
        "--text-col",
        "message",
        "--batch-rows",
        "100",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"380 rows classified by run {fr}" in r.stdout
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(lines) == 380 and lines[0]["id"] == "m0"
    assert set(lines[0]) == {"id", "labels", *(f"prob_{label}" for label in metrics["labels"])}
    r = trainctl(staged, "predict", "fr", "--input", str(texts), "--output", str(out_file), "--text-col", "message")
    assert r.returncode == 2 and "exists" in r.stderr  # never overwritten


SLOW = [*TINY_SETS, "--set", "defaults.trainer.epochs_clf=400"]  # outlasts the test; destroy cancels it


def test_ctrl_c_detaches_from_every_run(staged):
    import signal
    import threading

    from tests.support.trainctl import start_trainctl, wait_for
    from trainer.launchers.local import supervisor

    assert trainctl(staged, "data", "push", "en", str(SAMPLE / "en")).returncode == 0
    proc = start_trainctl(staged, "train", "fr", "en", "--parallel", "2", *SLOW)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        # Both runs under way: training, or (a machine that gives this test one core) the second queued for
        # the cores the first holds; either is a run Ctrl-C must leave going.
        wait_for(
            lambda: all(
                any(f"[{lang}]" in line and ("epoch" in line or "queued" in line) for line in seen)
                for lang in ("fr", "en")
            ),
            180,
            "both runs under way",
        )
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        reader.join(timeout=10)
        out = "".join(seen)
        assert proc.returncode == 130, out
        assert "detached from every run; the runs keep going" in out
        assert "trainctl destroy fr" in out and "trainctl destroy en" in out
        for lang in ("fr", "en"):
            pid = supervisor.read_pid(staged / ".trainstack/local/procs" / only_run(staged, lang))
            assert pid and supervisor._alive(pid), f"Ctrl-C must not stop the {lang} run"
    finally:
        proc.kill()
        for lang in ("fr", "en"):
            trainctl(staged, "destroy", lang)
    assert_nothing_left(staged, "fr")
    assert_nothing_left(staged, "en")


def test_a_local_run_queues_while_another_holds_the_cores(staged):
    from tests.support.trainctl import wait_for

    assert trainctl(staged, "data", "push", "en", str(SAMPLE / "en")).returncode == 0
    try:
        assert trainctl(staged, "train", "fr", "--detach", *SLOW).returncode == 0
        fr = only_run(staged, "fr")
        assert trainctl(staged, "train", "en", "--detach", *TINY_SETS).returncode == 0
        en_status = run_dir(staged, "en", only_run(staged, "en")) / "status.json"

        def state():
            return json.loads(en_status.read_text()) if en_status.exists() else {}

        wait_for(lambda: state().get("stage") == "queued", 60, "en to queue")
        log = (en_status.parent / "log.txt").read_text()
        assert f"held by fr run {fr}" in log and "local runs never share cores" in log
        assert trainctl(staged, "destroy", "fr").returncode == 0  # frees the cores
        wait_for(lambda: state().get("state") == "SUCCEEDED", 180, "en to start and finish once fr is gone")
        assert state()["resumed"] == 0  # waiting in the queue is not a resume
    finally:
        trainctl(staged, "destroy", "en")
    assert_nothing_left(staged, "en")
