"""Promotion is decided on figures on the same rows: refusals, history, compare, predict's default."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.runs.promotion import (
    PromotionRefused,
    RowsDiffer,
    compare,
    history,
    promote,
    promote_if_better,
    read_current,
)
from tests.support.runs import fake_run
from trainer.storage import LocalBucket

ROWS = [(1, "colis perdu", "b", "b"), (2, "mot de passe", "a", "a"), (3, "facture", "a", "b")]
A, B, WORSE, FAILED, OTHER = (
    "20260101-100000-aaaa",
    "20260102-100000-bbbb",
    "20260103-100000-cccc",
    "20260104-100000-dddd",
    "20260105-100000-eeee",
)


@pytest.fixture
def bucket(tmp_path):
    root = tmp_path / "bucket"
    fake_run(root, "fr", A, f1={"a": 0.6, "b": 0.6}, rows=ROWS)
    fake_run(root, "fr", B, f1={"a": 0.8, "b": 0.7}, rows=ROWS)
    fake_run(root, "fr", WORSE, f1={"a": 0.5, "b": 0.5}, rows=ROWS)
    fake_run(root, "fr", FAILED, f1={"a": 0.9, "b": 0.9}, state="FAILED")
    fake_run(root, "fr", OTHER, f1={"a": 0.99, "b": 0.99}, rows=ROWS[:2])
    return LocalBucket(root)


def test_promote_keeps_history_and_refuses_worse_failed_or_other_rows(bucket):
    first = promote(bucket, "fr", A, who="ci@test")
    assert first["replaces"] is None and first["promoted_by"] == "ci@test" and first["n_rows"] == 3
    second = promote(bucket, "fr", B)
    assert read_current(bucket, "fr")["run_id"] == B and second["replaces"] == A
    with pytest.raises(PromotionRefused, match="0.5000.*0.7500 on the same 3 valid rows"):
        promote(bucket, "fr", WORSE)
    with pytest.raises(PromotionRefused, match="did not succeed"):
        promote(bucket, "fr", FAILED, force=True)
    with pytest.raises(PromotionRefused, match="other rows"):
        promote(bucket, "fr", OTHER)  # better figures, but on 2 rows: not comparable
    assert read_current(bucket, "fr")["run_id"] == B  # nothing refused was written
    forced = promote(bucket, "fr", WORSE, force=True)
    assert forced["forced"] and read_current(bucket, "fr")["run_id"] == WORSE
    assert [h["run_id"] for h in history(bucket, "fr")] == [A, B, WORSE]


def test_promote_if_better_refuses_a_tie(bucket):
    assert promote_if_better(bucket, "fr", B) == f"promoted run {B} (macro-F1 0.750 on 3 valid rows)"
    fake_run(bucket.root, "fr", "20260106-100000-ffff", f1={"a": 0.8, "b": 0.7}, rows=ROWS)
    with pytest.raises(PromotionRefused):
        promote(bucket, "fr", "20260106-100000-ffff", require_better=True)
    assert promote_if_better(bucket, "fr", "20260106-100000-ffff").startswith("not promoted: run 20260106")
    promote(bucket, "fr", "20260106-100000-ffff")  # a tie is not worse: plain promote takes it


def test_compare_same_rows_and_refusal(bucket):
    result = compare(bucket, "fr", A, "fr", B)
    assert result["per_label"]["a"] == {"a": 0.6, "b": 0.8, "support": 3} and result["n_rows"] == 3
    with pytest.raises(RowsDiffer, match="3 valid rows of fr, .* 2 valid rows of fr"):
        compare(bucket, "fr", A, "fr", OTHER)
    # same count, other texts: still refused
    fake_run(
        bucket.root, "fr", "20260107-100000-1111", f1={"a": 0.6, "b": 0.6}, rows=[(1, "autre", "b", "b"), *ROWS[1:]]
    )
    with pytest.raises(RowsDiffer, match="not the same ones"):
        compare(bucket, "fr", A, "fr", "20260107-100000-1111")


def test_cli_promote_compare_and_runs_mark(project, bucket):
    sets = ["--set", f"bucket=file://{bucket.root}"]
    runner = CliRunner()
    r = runner.invoke(app, ["promote", "fr", B, *sets])
    assert r.exit_code == 0 and f"promoted run {B}" in r.output
    r = runner.invoke(app, ["promote", "fr", WORSE, *sets])
    assert r.exit_code == 2 and "same 3 valid rows" in r.output and "--force" in r.output
    r = runner.invoke(app, ["runs", "compare", A, OTHER, *sets])
    assert r.exit_code == 2 and "not scored on the same rows" in r.output
    r = runner.invoke(app, ["runs", "compare", A, B, *sets])
    assert r.exit_code == 0 and "a\t0.600\t0.800\t+0.200\t3" in r.output
    rows = json.loads(runner.invoke(app, ["runs", "--json", "--lang", "fr", *sets]).output)
    assert [row["run_id"] for row in rows if row["promoted"]] == [B]
    assert f"{B} *" in runner.invoke(app, ["runs", "--lang", "fr", *sets]).output


def test_predict_serves_the_promoted_run_not_the_newest(project, bucket):
    from stacks.runs.promotion import serving_run

    run_id, note = serving_run(bucket, "fr", None)  # nothing promoted: the newest successful run, saying so
    assert run_id == OTHER and f"newest successful run {OTHER}" in note
    promote(bucket, "fr", A)
    assert serving_run(bucket, "fr", None) == (A, None)
    assert serving_run(bucket, "fr", B) == (B, None)


def test_cli_promote_json_says_what_it_replaced_and_where_the_alias_went(project, bucket):
    sets = ["--set", f"bucket=file://{bucket.root}"]
    runner = CliRunner()
    r = runner.invoke(app, ["promote", "fr", A, "--json", *sets])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {  # the lines went to stderr
        "env": "local",
        "lang": "fr",
        "run_id": A,
        "previous": None,
        "macro_f1": 0.6,
        "scored_rows": "valid",
        "n_rows": 3,
        "model": "model.pth",
        "forced": False,
        "unchanged": False,
        "current": f"file://{bucket.root}/fr/models/CURRENT",
        "tracker": None,
    }
    assert f"promoted run {A}" in r.stderr
    closed_port = ["--set", "tracking.mlflow.uri=http://127.0.0.1:9"]  # refused at once
    r = runner.invoke(app, ["promote", "fr", B, "--json", *sets, *closed_port])
    assert r.exit_code == 0, r.output
    document = json.loads(r.stdout)
    assert (document["run_id"], document["previous"], document["macro_f1"]) == (B, A, 0.75)
    tracker = document["tracker"]
    assert (tracker["uri"], tracker["registered_model"], tracker["alias"], tracker["version"]) == (
        "http://127.0.0.1:9",
        "trainstack-local-fr",
        "champion",
        None,
    )
    assert tracker["error"].startswith("unreachable") and "not mirrored to MLflow" in r.stderr
    r = runner.invoke(app, ["promote", "fr", WORSE, "--json", *sets])
    assert r.exit_code == 2 and r.stdout == "" and "same 3 valid rows" in r.stderr


def test_promoting_the_promoted_run_again_succeeds_and_changes_nothing(project, bucket):
    """A script that promotes twice succeeds twice: the second time says so, writes nothing, exit 0."""
    sets = ["--set", f"bucket=file://{bucket.root}"]
    runner = CliRunner()
    assert runner.invoke(app, ["promote", "fr", B, *sets]).exit_code == 0
    before = {p: p.read_bytes() for p in (bucket.root / "fr" / "models").rglob("*") if p.is_file()}
    r = runner.invoke(app, ["promote", "fr", B, "--json", *sets])
    assert r.exit_code == 0, r.output
    document = json.loads(r.stdout)
    assert document["unchanged"] is True and document["run_id"] == B and document["previous"] is None
    assert f"run {B} is already the promoted model of fr: nothing changed" in r.stderr
    assert {p: p.read_bytes() for p in (bucket.root / "fr" / "models").rglob("*") if p.is_file()} == before
    assert "already the promoted model" in promote_if_better(bucket, "fr", B)  # train's promotion: no tie
