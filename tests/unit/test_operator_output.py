"""Operator output without a terminal: whole URIs, full tables, JSON on the read commands,
runs of every language in the bucket, STARTING runs, and cost estimates.

Fabricated run folders in the local (file://) bucket; no training runs here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from trainer.runfiles.run_ids import new_run_id
from trainer.runfiles.status_file import RunStatus
from trainer.storage import LocalBucket

runner = CliRunner()
OLD_FR, OLD_ES = "20250101-100000-aaaa", "20250102-100000-bbbb"
# Long enough that a wrapped line would show: well past 80 columns.
LONG = "a-rather-long-folder-name-so-that-every-uri-is-well-past-eighty-columns"


def write(bucket_root: Path, key: str, data) -> None:
    path = bucket_root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())


def finished(lang: str, run_id: str, env: str = "local", state: str = "SUCCEEDED") -> bytes:
    return RunStatus(
        run_id=run_id,
        lang=lang,
        env=env,
        state=state,
        stage="done",
        epoch=2,
        epochs=2,
        started_at="2025-01-01T10:00:00+00:00",
        updated_at="2025-01-01T10:05:00+00:00",
        finished_at="2025-01-01T10:05:00+00:00",
    ).to_json()


@pytest.fixture
def bucket(project, monkeypatch):
    """fr: a finished run with artifacts and a run applied moments ago (no status yet);
    es: a finished run of a language the env does not configure."""
    root = project / LONG / "bucket"
    monkeypatch.setenv("TRAINCTL_ENV", "local")
    fresh = new_run_id()
    write(root, f"fr/runs/{OLD_FR}/status.json", finished("fr", OLD_FR))
    write(
        root,
        f"fr/runs/{OLD_FR}/metrics.json",
        {
            "run_id": OLD_FR,
            "lang": "fr",
            "macro_f1": 0.8125,
            "labels": ["a", "b"],
            "micro_f1": 0.8,
            "accuracy": 0.8,
            "per_label": {
                label: {"precision": 0.8, "recall": 0.8, "f1": 0.8, "support": 5, "threshold": None}
                for label in ("a", "b")
            },
            "baseline_tfidf": {"macro_f1": 0.9},
            "rows": {"scores": "valid"},
        },
    )
    write(root, f"fr/runs/{OLD_FR}/model.pth", b"weights")
    write(root, f"fr/runs/{OLD_FR}/log.txt", b"line one\n[not markup] line two\n")
    write(root, f"fr/runs/{fresh}/metadata/trainctl.json", {"run_id": fresh, "lang": "fr"})
    write(root, f"es/runs/{OLD_ES}/status.json", finished("es", OLD_ES, state="FAILED"))
    write(root, "fr/data/train.csv", b"text,labels\nx,a\n")  # a language folder, but not runs
    return SimpleNamespace(root=root, fresh=fresh, sets=["--set", f"bucket=file://{LONG}/bucket"])


def test_runs_json_lists_every_language_with_cost(bucket):
    r = runner.invoke(app, ["runs", "--json", *bucket.sets])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(x["run_id"], x["lang"], x["state"]) for x in rows] == [
        (OLD_FR, "fr", "SUCCEEDED"),
        (OLD_ES, "es", "FAILED"),
        (bucket.fresh, "fr", "STARTING"),
    ]
    assert [x["configured"] for x in rows] == [True, False, True]
    assert all(x["est_cost"] == 0 and x["billed_vm_s"] == 0 for x in rows)  # local runs cost nothing
    assert rows[0]["macro_f1"] == 0.8125 and rows[0]["duration_s"] == 300
    assert rows[0]["url"].endswith(f"/{LONG}/bucket/fr/runs/{OLD_FR}")


def test_runs_table_without_a_terminal_is_whole(bucket):
    r = runner.invoke(app, ["runs", *bucket.sets])
    assert r.exit_code == 0, r.output
    assert "\x1b[" not in r.output and "…" not in r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("runs in file://")  # the title, whole, on one line
    assert lines[0].endswith(f"/{LONG}/bucket (times UTC; cost: estimated, USD)")
    assert lines[1].split("\t") == [
        "run",
        "lang",
        "state",
        "started",
        "duration",
        "macro-F1",
        "kept",
        "TF-IDF",
        "Δ",
        "rows",
        "resumed",
        "restarts",
        "VM time",
        "est. cost",
    ]
    # a run from before the blend: its classifier is what was kept
    assert lines[2].split("\t") == [
        OLD_FR,
        "fr",
        "SUCCEEDED",
        "2025-01-01 10:00",
        "300s",
        "0.812",
        "classifier",
        "0.900",
        "-0.088",
        "valid",
        "",
        "",
        "0.00h",
        "$0.00",
    ]
    assert lines[3].split("\t")[:3] == [OLD_ES, "es (not in env local)", "FAILED"]


def test_status_right_after_a_start_is_starting(bucket):
    r = runner.invoke(app, ["status", "fr", *bucket.sets])
    assert r.exit_code == 0, r.output
    assert f"run {bucket.fresh} (fr, env local): STARTING" in r.output
    data = json.loads(runner.invoke(app, ["status", "fr", "--json", *bucket.sets]).output)
    assert data["run_id"] == bucket.fresh and data["state"] == "STARTING" and data["resumed"] == 0
    old = json.loads(runner.invoke(app, ["status", "es", "--json", *bucket.sets]).output)  # not configured
    assert old["state"] == "FAILED" and old["run_id"] == OLD_ES and old["epochs"] == 2


def test_runs_show_and_logs_json(bucket):
    r = runner.invoke(app, ["runs", "show", OLD_FR, *bucket.sets])
    assert r.exit_code == 0, r.output
    model_uri = f"file://{(bucket.root / 'fr/runs' / OLD_FR / 'model.pth').resolve()}"
    assert len(model_uri) > 100
    assert any(line.split()[-1] == model_uri for line in r.output.splitlines())  # whole, on one line
    data = json.loads(runner.invoke(app, ["runs", "show", OLD_FR, "--json", *bucket.sets]).output)
    assert data["run"]["state"] == "SUCCEEDED" and data["metrics"]["macro_f1"] == 0.8125
    assert data["baselines"]["baseline_tfidf"]["macro_f1"] == 0.9
    assert data["artifacts"]["model.pth"] == model_uri and "metrics.json" in data["artifacts"]
    missing = runner.invoke(app, ["runs", "show", "nope", *bucket.sets])
    assert missing.exit_code == 2 and "no run 'nope'" in missing.output
    logs = runner.invoke(app, ["logs", "fr", "--run", OLD_FR, "--json", *bucket.sets])
    assert [json.loads(x)["line"] for x in logs.output.splitlines()] == ["line one", "[not markup] line two"]


def test_gcp_run_cost_from_the_vm_boot_records(project, tmp_path, monkeypatch):
    from stacks.project import Project
    from stacks.runs.records import record_cost, run_row
    from stacks.targets.gcp.prices import fallback_book

    config = Project(project).load("dev", ["gcp.project=p1"])
    b = LocalBucket(tmp_path / "b")
    run_id = "20250301-120000-cccc"
    write(
        b.root,
        f"fr/runs/{run_id}/status.json",
        RunStatus(
            run_id=run_id,
            lang="fr",
            env="dev",
            state="SUCCEEDED",
            started_at="2025-03-01T12:05:00+00:00",
            updated_at="2025-03-01T14:00:00+00:00",
            finished_at="2025-03-01T14:00:00+00:00",
        ).to_json(),
    )
    write(
        b.root,
        f"fr/runs/{run_id}/metadata/trainctl.json",
        {
            "run_id": run_id,
            "machine_type": "g2-standard-8",
            "gpu": {"type": "nvidia-l4", "count": 1},
            "spot": True,
            "nodes": 1,
            "zone": "europe-west4-b",
            "region": "europe-west4",
        },
    )
    # Booted at 12:00, preempted and recreated at 13:00 (same VM name): 2 h of VM time in all.
    for booted in ("20250301T120000Z", "20250301T130000Z"):
        write(
            b.root,
            f"fr/runs/{run_id}/metadata/instances/dev-train-fr-x1/{booted}.json",
            {"name": "dev-train-fr-x1", "booted_at": booted, "machine_type": "g2-standard-8"},
        )
    row = run_row(b, config, "fr", run_id)
    # the suite's catalog is a closed port: the dated fallback table prices it, and says so
    per_hour, note = fallback_book().vm_per_hour("europe-west4", "g2-standard-8", "nvidia-l4", 1, True)
    assert note == "" and per_hour and row["vm_per_hour"] == per_hour
    assert row["prices_source"] == "fallback table of 2026-07-30 (stacks/targets/gcp/prices.yaml)"
    assert row["vm_boots"] == 2 and row["billed_vm_s"] == 7200
    assert row["est_cost"] == pytest.approx(2 * per_hour) and row["spot"] is True
    cost = record_cost(b, config, "fr", run_id)
    assert json.loads(b.read_bytes(f"fr/runs/{run_id}/metadata/cost.json")) == cost
    # A machine type the table does not know: "cost unknown", not a crash.
    write(
        b.root, f"fr/runs/{run_id}/metadata/trainctl.json", {"machine_type": "z9-mystery-1", "region": "europe-west4"}
    )
    row = run_row(b, config, "fr", run_id)
    assert row["est_cost"] is None and row["cost_note"].startswith(
        "cost unknown: no price for machine type z9-mystery-1"
    )
    # No trainctl.json (the apply made VMs, its metadata never landed): the machine the run's config recorded,
    # in the language's gcp block, or at its top where an older version wrote it.
    b.delete(f"fr/runs/{run_id}/metadata/trainctl.json")
    recorded = json.loads(config.model_dump_json())
    recorded["languages"]["fr"]["gcp"]["machine_type"] = "g2-standard-4"
    write(b.root, f"fr/runs/{run_id}/metadata/config.json", recorded)
    assert run_row(b, config, "fr", run_id)["machine_type"] == "g2-standard-4"
    recorded["languages"]["fr"].update(recorded["languages"]["fr"].pop("gcp"), machine_type="g2-standard-12")
    write(b.root, f"fr/runs/{run_id}/metadata/config.json", recorded)
    assert run_row(b, config, "fr", run_id)["machine_type"] == "g2-standard-12"
    from stacks.cli import runs_cmds

    monkeypatch.setattr(runs_cmds, "open_env", lambda *a, **k: (config, b))  # a gcp env over a folder bucket
    listed = runner.invoke(app, ["runs", "--env", "dev"])
    assert listed.exit_code == 0, listed.output
    assert "costs priced from the fallback table of 2026-07-30 (stacks/targets/gcp/prices.yaml)" in listed.output


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_fallback_table_knows_every_configured_machine(project, env):
    from stacks.project import Project
    from stacks.targets.gcp.prices import estimate, fallback_book

    book = fallback_book()
    config = Project(project).load(env, ["gcp.project=p1"])
    for lang in config.languages:
        for spot in (True, False):
            settings = config.language(lang).model_copy(update={"spot": spot})
            est = estimate(settings, config.gcp.region, book)
            assert est.per_hour and est.at_max_run_hours == pytest.approx(
                est.per_hour * settings.max_run_hours, abs=0.01
            )
    unknown = estimate(_on_machine(config.language("fr"), "z9-mystery-1"), config.gcp.region, book)
    assert unknown.per_hour is None and "cost unknown" in unknown.line("z9-mystery-1")


def test_cdktf_and_terraform_telemetry_off():
    import stacks  # noqa: F401  (sets it for every cdktf/terraform call of the process)

    assert os.environ["CHECKPOINT_DISABLE"] == "1"
    assert '"CHECKPOINT_DISABLE": "1"' in (Path(stacks.__file__).parent / "terraform.py").read_text()


def test_languages_and_runs_found_in_a_gcs_bucket(gcs_env):
    from stacks.runs.records import bucket_languages, run_ids
    from trainer.storage import open_bucket

    b = open_bucket("gs://test-bucket/operator-output")
    b.write_bytes("es/runs/20250101-100000-aaaa/status.json", finished("es", "20250101-100000-aaaa"))
    b.write_bytes("fr/runs/20250102-100000-bbbb/metadata/trainctl.json", b"{}")
    b.write_bytes("de/data/train.csv", b"text,labels\nx,a\n")
    assert bucket_languages(b) == ["es", "fr"]
    assert run_ids(b, "fr") == ["20250102-100000-bbbb"]


def _on_machine(settings, machine_type: str):
    """A language's settings with another gcp machine type."""
    return settings.model_copy(update={"gcp": settings.gcp.model_copy(update={"machine_type": machine_type})})
