"""The run's pictures (rank 0, at upload): loss history, per-label F1 against TF-IDF, confusion matrix."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def history(records: list[dict], path: Path) -> Path | None:
    if not records:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for key in ("train_loss", "valid_loss"):
        ax.plot(range(1, len(records) + 1), [h.get(key) for h in records], label=key, marker="o")
    ax.set_xlabel("epoch (all stages)")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def per_label_f1(result: dict, path: Path) -> Path:
    """Model vs TF-IDF F1 per label, on the rows the metrics were scored on."""
    plt = _pyplot()
    labels = result["labels"]
    model = [result["per_label"][l]["f1"] for l in labels]
    tfidf = [result["baseline_tfidf"]["per_label"][l]["f1"] for l in labels]
    y = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.3 * len(labels) + 1)))
    ax.barh(y - 0.2, model, height=0.4, label=f"model (macro {result['macro_f1']:.3f})")
    ax.barh(y + 0.2, tfidf, height=0.4, label=f"TF-IDF (macro {result['baseline_tfidf']['macro_f1']:.3f})")
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"F1 on {result['rows']['scores']} rows")
    ax.legend(loc="lower right")
    fig.tight_layout()
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
                ax.text(j, i, str(matrix[i, j]), ha="center", va="center", fontsize=8,
                        color="white" if matrix[i, j] > matrix.max() / 2 else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
