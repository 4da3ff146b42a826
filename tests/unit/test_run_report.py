"""report.html parses, embeds every image, and has the tables a person looks for."""

from __future__ import annotations

from pathlib import Path

from tests.support.html_page import parse
from tests.support.runs import fake_run, write
from trainer.runfiles.report_html import render_run
from trainer.storage import LocalBucket

RUN = "20260101-100000-aaaa"
PNG = bytes.fromhex("89504e470d0a1a0a") + b"not really a picture"


def test_report_of_a_finished_run(tmp_path: Path):
    root = tmp_path / "bucket"
    fake_run(
        root,
        "fr",
        RUN,
        f1={"compte": 0.8, "livraison": 0.6},
        rows=[(1, "colis <perdu> & cassé", "livraison", "compte"), (2, "mot de passe", "compte", "compte")],
    )
    for name in ("per_label_f1", "history"):
        write(root, f"fr/runs/{RUN}/plots/{name}.png", PNG)
    write(root, f"fr/runs/{RUN}/metadata/trainer.json", {"args": {"epochs_clf": 3, "lang": "fr"}, "arch": "AWD_LSTM"})
    write(root, f"fr/runs/{RUN}/metadata/cost.json", {"est_cost": 0.42, "billed_vm_s": 600})
    page = parse(render_run(LocalBucket(root), "fr", RUN))
    assert len(page.images) == 2 and all(src.startswith("data:image/png;base64,") for src in page.images)
    for heading in (
        "Per label, against both baselines",
        "Worst mistakes",
        "Base language model",
        "Data",
        "Configuration",
        "Timeline",
        "Cost",
    ):
        assert heading in page.headings
    cells = page.cells
    i = cells.index("compte")  # the per-label table: label, support, P, R, F1, threshold, TF-IDF F1, Δ
    assert cells[i + 4] == "0.800" and cells[i + 6] == "0.700" and cells[i + 7] == "+0.100"
    assert "colis <perdu> & cassé" in cells  # the mistake, its text escaped and read back whole
    assert "0.42" in cells and "epochs_clf" in cells


def test_report_of_a_failed_run_says_why(tmp_path: Path):
    root = tmp_path / "bucket"
    fake_run(root, "fr", RUN, f1={"a": 0.1}, state="FAILED")
    raw = (root / f"fr/runs/{RUN}/status.json").read_text().replace('"error": null', '"error": "no label column"')
    (root / f"fr/runs/{RUN}/status.json").write_text(raw)
    page = parse(render_run(LocalBucket(root), "fr", RUN))
    assert "Error" in page.headings and "Per label, against both baselines" not in page.headings
