"""metrics.json as one typed document, and the restart count as one rule (trainer.runfiles.status_file)."""

from __future__ import annotations

import json

import pytest

from trainer.launchers.interruptions import interruption, restarts_exhausted
from trainer.runfiles.metrics_file import MetricsError, RunMetrics
from trainer.runfiles.status_file import RunStatus


def figures(f1: float, *labels: str, threshold: float | None = None) -> dict:
    return {
        "macro_f1": f1,
        "micro_f1": f1,
        "accuracy": f1,
        "per_label": {
            label: {"precision": f1, "recall": f1, "f1": f1, "support": 3, "threshold": threshold} for label in labels
        },
    }


def classifier_doc(**extra) -> dict:
    return {
        "run_id": "r1",
        "lang": "fr",
        **figures(0.8, "a", "b", threshold=0.4),
        "labels": ["a", "b"],
        "multi_label": True,
        "rows": {"fit": "train", "thresholds": "valid", "scores": "test"},
        "baseline": figures(0.3),
        "baseline_tfidf": figures(0.7, "a", "b"),
        "n_train": 10,
        "n_valid": 4,
        "n_test": 4,
        "duration_s": 12.5,
        "history": [{"stage": "classifier", "epoch": 1}],
        "future_key": 1,
        **extra,
    }


def test_a_classifier_document_reads_typed_and_writes_back_unchanged():
    doc = classifier_doc()
    m = RunMetrics.from_json(json.dumps(doc))
    assert (m.job, m.macro_f1, m.tfidf_macro_f1, m.scored_rows, m.n_test) == ("classifier", 0.8, 0.7, "test", 4)
    assert m.model.thresholds(["b", "a"]) == [0.4, 0.4] and m.multi_label and not m.bidirectional
    assert json.loads(m.to_json()) == doc  # keys this version does not type survive a round trip


def test_the_kept_model_the_classifier_and_the_blend_read_typed():
    doc = classifier_doc(
        kept="blend",
        classifier=figures(0.6, "a", "b", threshold=0.5),
        blend={**figures(0.8, "a", "b", threshold=0.4), "weight": 0.3},
    )
    m = RunMetrics.from_document(doc)
    assert m.blended and m.blend_weight == 0.3 and m.macro_f1 == m.blend.macro_f1 == 0.8
    assert m.classifier.macro_f1 == 0.6 and m.model.thresholds(["a"]) == [0.4]  # predict decides on the kept's
    plain = RunMetrics.from_document(classifier_doc())  # an older metrics.json: the classifier is all there is
    assert not plain.blended and plain.kept == "classifier" and plain.blend_weight is None
    assert plain.classifier.macro_f1 == plain.macro_f1 and plain.blend is None


def test_a_pretrain_document_and_old_classifier_documents():
    m = RunMetrics.from_document(
        {
            "run_id": "p",
            "lang": "el",
            "job": "pretrain-lm",
            "perplexity": 27.4,
            "base_lm": {"id": "pt-1"},
            "duration_s": 1.0,
            "history": [],
        }
    )
    assert (m.job, m.perplexity, m.macro_f1, m.base_lm["id"]) == ("pretrain-lm", 27.4, None, "pt-1")
    old = classifier_doc()
    for key in ("multi_label", "rows"):
        del old[key]
    m = RunMetrics.from_document(old)  # before these fields: tuned thresholds meant multi-label
    assert m.multi_label is True and m.scored_rows is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"labels": None}, "labels missing"),
        ({"macro_f1": "high"}, "the model.macro_f1"),
        ({"labels": ["a", "b", "c"]}, r"no per_label figures for \['c'\]"),
        ({"baseline_tfidf": {"per_label": {}}}, "baseline_tfidf.macro_f1"),
        ({"job": "distill"}, "unknown job"),
        ({"kept": "tfidf"}, "kept is 'tfidf'"),
        ({"kept": "blend", "blend": figures(0.8, "a", "b")}, "blend.weight is missing"),
        ({"run_id": 7}, "run_id missing"),
    ],
)
def test_a_document_without_what_its_job_needs_is_refused(change, message):
    with pytest.raises(MetricsError, match=message):
        RunMetrics.from_document(classifier_doc(**change))
    with pytest.raises(MetricsError, match="not JSON"):
        RunMetrics.from_json(b"{truncated")


def test_the_restart_count_is_the_runs_whoever_counts():
    status = RunStatus(run_id="r", lang="fr", env="local")
    assert interruption(None) == 1 and interruption(status) == 1
    status.resumed = 2  # two resumes recorded by the trainer: this is the third interruption
    assert interruption(status) == 3 and interruption(status, seen=1) == 3
    # a trainer killed before it could record its resume: the watcher's own count wins
    assert interruption(status, seen=4) == 5
    assert restarts_exhausted(3, 3) is None
    assert restarts_exhausted(4, 3) == "interrupted 4 times; max_restarts=3 reached"


@pytest.mark.parametrize(
    "weight, kept, served",
    [
        (0.0, "TF-IDF", "TF-IDF (tfidf.json/.npz)"),
        (1.0, "classifier", "model.pth"),
        (0.4, "blend 0.4 × classifier + 0.6 × TF-IDF", "blend 0.4 x model.pth + 0.6 x TF-IDF (tfidf.json/.npz)"),
    ],
)
def test_the_kept_model_is_named_plainly(weight, kept, served):
    """A blend weighing the classifier 0 is TF-IDF alone, one weighing it 1 the classifier: said so, in the
    table's caption (the last line of `train`), in the promotion record and in the report."""
    from stacks.cli.run_console import metrics_table, plain
    from stacks.runs.promotion import _served
    from trainer.runfiles.report_html import kept_section

    blend = {**figures(0.8, "a", "b", threshold=0.4), "weight": weight}
    classifier = figures(0.6, "a", "b", threshold=0.5)
    m = RunMetrics.from_document(classifier_doc(kept="blend", classifier=classifier, blend=blend))
    assert m.kept_name == kept
    assert plain(metrics_table(m).caption).startswith(f"kept: {kept} (classifier alone macro-F1 0.600) · ")
    assert _served(m) == served
    alone = f"kept: {kept} alone" if kept in ("TF-IDF", "classifier") else "kept: predict serves it"
    assert alone in kept_section(m)
