"""`trainctl runs show`: one run's document (its row, figures beside both baselines, metadata, artifact URIs) and
how it is printed."""

from __future__ import annotations

import json

from rich.markup import escape

from stacks.cli.common import console


def run_document(bucket, code: str, run_id: str, row: dict, metrics: dict | None) -> dict:
    """`runs show --json`: the run's row, its figures beside both baselines, metadata and artifact URIs."""
    from trainer.runfiles.keys import ARTIFACTS, BWD_MODEL, TRAINCTL_META, run_key

    meta_key = run_key(code, run_id, TRAINCTL_META)
    files = [
        *ARTIFACTS,
        BWD_MODEL,
        "test_predictions.csv",
        "report.html",
        "plots/per_label_f1.png",
        "plots/confusion_matrix.png",
        "plots/history.png",
        "log.txt",
        "status.json",
    ]  # those that exist
    return {
        "run": row,
        "metrics": {
            k: metrics.get(k)
            for k in (
                "labels",
                "macro_f1",
                "micro_f1",
                "accuracy",
                "n_train",
                "n_valid",
                "n_test",
                "rows",
                "duration_s",
            )
        }
        if metrics
        else None,
        "baselines": {
            k: {m: (metrics.get(k) or {}).get(m) for m in ("macro_f1", "micro_f1", "accuracy")}
            for k in ("baseline_tfidf", "baseline")
        }
        if metrics
        else None,
        # what predict serves (the classifier, or its blend with TF-IDF) beside the other two on the same rows
        "kept": {
            "kept": metrics.get("kept", "classifier"),
            "blend_weight": (metrics.get("blend") or {}).get("weight"),
            **{
                k: {m: (metrics.get(k) or {}).get(m) for m in ("macro_f1", "micro_f1", "accuracy")}
                for k in ("classifier", "blend")
            },
        }
        if metrics and "classifier" in metrics
        else None,
        # trainer.bidirectional: the backward classifier and the forward+backward ensemble
        "bidirectional": {
            k: {m: metrics[k].get(m) for m in ("macro_f1", "micro_f1", "accuracy")} for k in ("backward", "ensemble")
        }
        if metrics and "ensemble" in metrics
        else None,
        "metadata": json.loads(bucket.read_bytes(meta_key)) if bucket.exists(meta_key) else None,
        "artifacts": {
            n: bucket.url(run_key(code, run_id, n)) for n in files if bucket.exists(run_key(code, run_id, n))
        },
    }


def print_run(data: dict, typed, run_id: str, code: str, env: str) -> None:
    """`runs show`: the state, what was kept, the row's other fields, the metrics table, the artifacts."""
    row = data["run"]
    console.print(f"run {run_id} ({code}, env {env}): [bold]{row['state']}[/]", soft_wrap=True)
    if data["kept"]:
        k = data["kept"]
        console.print(
            f"  kept           {typed.kept_name} (classifier macro-F1 "
            f"{k['classifier']['macro_f1']:.3f}, blend "
            f"{k['blend']['macro_f1']:.3f} at weight {k['blend_weight']}, TF-IDF "
            f"{data['baselines']['baseline_tfidf']['macro_f1']:.3f}; same rows)",
            soft_wrap=True,
        )
    for key in (
        "stage",
        "started_at",
        "finished_at",
        "duration_s",
        "resumed",
        "restarts",
        "placements",
        "ran_in",
        "preemptions",
        "capacity_wait_s",
        "interrupted_s",
        "macro_f1",
        "error",
        "machine_type",
        "gpu_type",
        "gpu_count",
        "spot",
        "nodes",
        "vm_boots",
        "billed_vm_s",
        "est_cost",
        "cost_note",
        "prices_source",
    ):
        if row.get(key) not in (None, "", []):
            value = " → ".join(map(str, row[key])) if isinstance(row[key], list) else str(row[key])
            console.print(f"  {key:14} {escape(value)}", soft_wrap=True)
    if typed and typed.model is not None:  # a classifier run: per label, with both baselines
        from stacks.cli.run_console import metrics_table, print_table

        print_table(metrics_table(typed))
    for name, url in data["artifacts"].items():
        console.print(f"  {name:22} {url}", soft_wrap=True, markup=False)
