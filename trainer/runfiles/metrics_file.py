"""metrics.json, typed: what a run writes last, and what `runs`, `predict`, the live view and the
benchmarks read. Standard library only (the CLI reads it without torch).

The document keeps every key as written (`document`), so a newer trainer's extra keys survive
a read by an older CLI; the typed fields are the ones code here relies on, checked on write
(the trainer builds its metrics through `RunMetrics.from_document`) and on read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from trainer.params import Job


class MetricsError(ValueError):
    """metrics.json lacks a field its job must have, or has one of the wrong type."""


@dataclass(frozen=True)
class LabelFigures:
    precision: float
    recall: float
    f1: float
    support: int
    threshold: float | None  # multi-label: tuned on the validation rows; single-label: None (argmax)


@dataclass(frozen=True)
class Figures:
    """One model's (or baseline's) scores on the scored rows."""

    macro_f1: float
    micro_f1: float | None = None
    accuracy: float | None = None
    per_label: dict[str, LabelFigures] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw, where: str) -> "Figures | None":
        if raw is None:
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("macro_f1"), (int, float)):
            raise MetricsError(f"metrics.json: {where}.macro_f1 missing or not a number")
        per_label = {}
        for label, m in (raw.get("per_label") or {}).items():
            try:
                per_label[label] = LabelFigures(
                    float(m["precision"]),
                    float(m["recall"]),
                    float(m["f1"]),
                    int(m["support"]),
                    None if m.get("threshold") is None else float(m["threshold"]),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise MetricsError(f"metrics.json: {where}.per_label[{label!r}]: {exc}") from exc
        return cls(float(raw["macro_f1"]), raw.get("micro_f1"), raw.get("accuracy"), per_label)

    def thresholds(self, labels: list[str]) -> list[float | None]:
        return [self.per_label[label].threshold for label in labels]


@dataclass(frozen=True)
class RunMetrics:
    """A run's metrics.json (classifier runs and base-LM pretrains)."""

    run_id: str
    lang: str
    job: str
    duration_s: float | None
    history: list[dict]
    document: dict  # every key as written
    # classifier runs
    labels: list[str] = field(default_factory=list)
    multi_label: bool = False
    allow_empty: bool = False
    model: Figures | None = None  # the (forward) classifier's
    scored_rows: str | None = None  # "test" or "valid" (None: from before the field; valid rows)
    n_train: int = 0
    n_valid: int = 0
    n_test: int = 0
    baseline: Figures | None = None  # the majority label
    baseline_tfidf: Figures | None = None
    backward: Figures | None = None  # trainer.bidirectional
    ensemble: Figures | None = None
    base_lm: dict | None = None
    kept: str = "classifier"  # what predict serves: the classifier, or its blend with TF-IDF (tfidf.json/.npz)
    blend_weight: float | None = None  # the classifier's share in the kept blend
    classifier: Figures | None = None  # the classifier alone (same as `model` unless the blend was kept)
    blend: Figures | None = None  # the best blend on the validation rows, kept or not
    # base-LM pretrains
    perplexity: float | None = None

    @classmethod
    def from_document(cls, doc: dict) -> "RunMetrics":
        if not isinstance(doc, dict):
            raise MetricsError("metrics.json is not a JSON object")
        for key in ("run_id", "lang"):
            if not isinstance(doc.get(key), str):
                raise MetricsError(f"metrics.json: {key} missing or not a string")
        job = doc.get("job", Job.CLASSIFIER.value)  # runs from before the field were classifier runs
        common = dict(
            run_id=doc["run_id"],
            lang=doc["lang"],
            job=job,
            duration_s=doc.get("duration_s"),
            history=list(doc.get("history") or []),
            document=doc,
            base_lm=doc.get("base_lm"),
        )
        if job == Job.PRETRAIN_LM:
            return cls(**common, perplexity=doc.get("perplexity"))
        if job != Job.CLASSIFIER:
            raise MetricsError(f"metrics.json: unknown job {job!r}")
        labels = doc.get("labels")
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise MetricsError("metrics.json: labels missing or not a list of strings")
        model = Figures.parse(doc, "the model")
        missing = [label for label in labels if label not in model.per_label]
        if missing:
            raise MetricsError(f"metrics.json: no per_label figures for {missing}")
        kept = doc.get("kept", "classifier")
        if kept not in ("classifier", "blend"):
            raise MetricsError(f"metrics.json: kept is {kept!r} (classifier or blend)")
        if kept == "blend" and not isinstance((doc.get("blend") or {}).get("weight"), (int, float)):
            raise MetricsError("metrics.json: kept is blend but blend.weight is missing or not a number")
        # before the field: multi-label runs were those with tuned thresholds
        multi = (
            doc["multi_label"]
            if "multi_label" in doc
            else bool(labels) and model.per_label[labels[0]].threshold is not None
        )
        return cls(
            **common,
            labels=labels,
            multi_label=bool(multi),
            allow_empty=bool(doc.get("allow_empty", False)),
            model=model,
            scored_rows=(doc.get("rows") or {}).get("scores"),
            n_train=int(doc.get("n_train") or 0),
            n_valid=int(doc.get("n_valid") or 0),
            n_test=int(doc.get("n_test") or 0),
            baseline=Figures.parse(doc.get("baseline"), "baseline"),
            baseline_tfidf=Figures.parse(doc.get("baseline_tfidf"), "baseline_tfidf"),
            backward=Figures.parse(doc.get("backward"), "backward"),
            ensemble=Figures.parse(doc.get("ensemble"), "ensemble"),
            kept=doc.get("kept", "classifier"),
            blend_weight=(doc.get("blend") or {}).get("weight") if doc.get("kept") == "blend" else None,
            classifier=Figures.parse(doc.get("classifier") or doc, "classifier"),
            blend=Figures.parse(doc.get("blend"), "blend"),
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> "RunMetrics":
        try:
            return cls.from_document(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise MetricsError(f"metrics.json is not JSON: {exc}") from exc

    def to_json(self) -> bytes:
        return json.dumps(self.document, indent=2).encode()

    @property
    def macro_f1(self) -> float | None:
        return self.model.macro_f1 if self.model is not None else None

    @property
    def tfidf_macro_f1(self) -> float | None:
        return self.baseline_tfidf.macro_f1 if self.baseline_tfidf is not None else None

    @property
    def blended(self) -> bool:
        """predict mixes in the TF-IDF part (tfidf.json + tfidf.npz) with `blend_weight`."""
        return self.kept == "blend"

    @property
    def tfidf_alone(self) -> bool:
        """The kept blend weighs the classifier 0: predict needs TF-IDF's files alone, not model.pth."""
        return self.blended and self.blend_weight is not None and self.blend_weight <= 0

    @property
    def kept_name(self) -> str:
        """What predict serves, in plain words (kept_model_name)."""
        return kept_model_name(self.kept, self.blend_weight)

    @property
    def bidirectional(self) -> bool:
        return self.ensemble is not None


def kept_model_name(kept: str, weight: float | None, *, classifier: str = "classifier", times: str = "×") -> str:
    """The kept model named plainly: a blend that weighs the classifier 0 is TF-IDF alone, one that weighs
    it 1 is the classifier alone; any other blend is said with its weights
    ("blend 0.4 × classifier + 0.6 × TF-IDF")."""
    if kept != "blend" or weight is None or weight >= 1:
        return classifier
    if weight <= 0:
        return "TF-IDF"
    return f"blend {weight:.1f} {times} {classifier} + {1 - weight:.1f} {times} TF-IDF"
