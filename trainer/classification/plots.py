"""The run's pictures (rank 0, at upload): loss history, per-label F1 against TF-IDF, confusion matrix."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# the metric a stage is judged by, first found: LM stages by perplexity, the classifier by macro-F1
STAGE_METRICS = ("perplexity", "macro_f1", "macro_f1@0.5", "accuracy", "label_accuracy@0.5", "token_accuracy")


def stage_metric(records: list[dict]) -> str | None:
    return next((key for key in STAGE_METRICS if any(r.get(key) is not None for r in records)), None)


def history(records: list[dict], path: Path) -> Path | None:
    """One panel per stage (base LM, LM fine-tuning, classifier, ...): its losses, and its own metric on
    a second axis; stages never share an axis (LM cross-entropy and classifier loss are not comparable)."""
    if not records:
        return None
    stages = list(dict.fromkeys(r.get("stage", "training") for r in records))
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(stages), figsize=(4.8 * len(stages), 3.6), squeeze=False)
    for ax, stage in zip(axes[0], stages):
        rows = [r for r in records if r.get("stage", "training") == stage]
        x = range(1, len(rows) + 1)
        for key, style in (("train_loss", "-o"), ("valid_loss", "-s")):
            if any(r.get(key) is not None for r in rows):
                ax.plot(x, [r.get(key) for r in rows], style, label=key, markersize=4)
        ax.set_title(stage, pad=24)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("loss")
        metric = stage_metric(rows)
        lines, names = ax.get_legend_handles_labels()
        if metric:
            twin = ax.twinx()
            (line,) = twin.plot(x, [r.get(metric) for r in rows], "-^", color="tab:green", markersize=4)
            twin.set_ylabel(metric, color="tab:green")
            lines, names = [*lines, line], [*names, metric]
        # between the title and the axes: never over a curve
        ax.legend(lines, names, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path


def per_label_f1(result: dict, path: Path) -> Path:
    """Model vs TF-IDF F1 per label, on the rows the metrics were scored on."""
    plt = _pyplot()
    labels = result["labels"]
    model = [result["per_label"][l]["f1"] for l in labels]
    tfidf = [result["baseline_tfidf"]["per_label"][l]["f1"] for l in labels]
    y = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.3 * len(labels) + 1.4)), layout="constrained")
    ax.barh(y - 0.2, model, height=0.4, label=f"model (macro {result['macro_f1']:.3f})")
    ax.barh(y + 0.2, tfidf, height=0.4, label=f"TF-IDF (macro {result['baseline_tfidf']['macro_f1']:.3f})")
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"F1 on {result['rows']['scores']} rows")
    fig.legend(loc="outside lower center", ncol=2, frameon=False)  # below the axes, never over a bar
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def confusion(true_idx: np.ndarray, pred_idx: np.ndarray, labels: list[str], path: Path, split: str) -> Path:
    """Single-label: rows = true label, columns = predicted, counts."""
    plt = _pyplot()
    k = len(labels)
    matrix = np.zeros((k, k), dtype=int)
    np.add.at(matrix, (true_idx, pred_idx), 1)
    size = max(4, 0.45 * k + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(k), labels, rotation=90)
    ax.set_yticks(range(k), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"confusion matrix ({split} rows)")
    if k <= 30:
        for i in range(k):
            for j in range(k):
                ax.text(
                    j,
                    i,
                    str(matrix[i, j]),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if matrix[i, j] > matrix.max() / 2 else "black",
                )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
