"""TF-IDF + logistic regression: what a team gets in minutes with scikit-learn, on the model's rows.

Fitted on the same training rows as the model, thresholded by the same policy (argmax for
single-label; per-label thresholds tuned on the validation rows for multi-label) and scored on
the same rows, so the two F1s compare directly. The baseline is made as strong as a careful
engineer would make it in an afternoon, so "model - TF-IDF" never flatters the model:
- features: word 1-2-grams + character 2-5-grams within word boundaries; where words are not
  separated by spaces (ja, zh, th, ...) character 1-3-grams over the whole text instead;
- one binary logistic regression per label (liblinear), class-weighted (`balanced`): rare
  labels are not drowned by frequent ones;
- its regularisation C chosen on the validation rows (macro-F1 + micro-F1) when there are enough of
  them (MIN_ROWS_TO_CHOOSE_C), else C=10.

The fitted baseline (`TfidfModel`) is plain arrays and vocabularies: `save` writes them as
JSON + npz (nothing unpickled on load), and the blend (trainer.classification.blend) and
`trainctl predict` read them back.
"""

from __future__ import annotations

import io
import json
import time
from array import array
from dataclasses import dataclass, field

import numpy as np

from trainer.classification import metrics as M
from trainer.text.languages import SENTENCEPIECE_FIRST

UNSEGMENTED = frozenset(SENTENCEPIECE_FIRST - {"ko", "vi"})  # written without spaces between words
C_GRID = (1.0, 3.0, 10.0, 30.0)
DEFAULT_C = 10.0
# C is chosen on validation only with this many validation rows: on 25-250 rows the choice was noise and
# cost macro-F1 against a fixed C=10 (docs/BENCHMARKS.md, "Real tasks"); on more it is measurable.
MIN_ROWS_TO_CHOOSE_C = 500
MAX_WORD_FEATURES, MAX_CHAR_FEATURES = 150_000, 200_000
FORMAT = "trainstack-tfidf/1"


@dataclass(frozen=True)
class TfidfSpec:
    """How the baseline is built. `legacy()` is the first one (C=10, no class weights, char_wb 2-5-grams for
    every language; benchmarks show both)."""

    unsegmented: bool = False
    c_grid: tuple[float, ...] = C_GRID
    class_weight: str | None = "balanced"
    fixed_c: float = DEFAULT_C  # C with too few validation rows to choose it
    char_analyzer: str | None = None  # None: char_wb 2-5 (segmented) / char 1-3 (unsegmented)

    @classmethod
    def for_language(cls, code: str | None) -> "TfidfSpec":
        return cls(unsegmented=(code or "") in UNSEGMENTED)

    @classmethod
    def legacy(cls) -> "TfidfSpec":
        return cls(c_grid=(10.0,), class_weight=None, char_analyzer="char_wb", fixed_c=10.0)

    def describe(self) -> str:
        feats = (
            "char 1-3-grams (no spaces between words)"
            if self._char()[0] == "char"
            else "word 1-2-grams + char 2-5-grams"
        )
        weight = ", class-weighted" if self.class_weight else ""
        grid = (
            f"C chosen on >= {MIN_ROWS_TO_CHOOSE_C} validation rows from {list(self.c_grid)}, else {self.fixed_c:g}"
            if len(self.c_grid) > 1
            else f"C={self.c_grid[0]:g}"
        )
        return f"TF-IDF ({feats}) + one logistic regression per label (liblinear{weight}; {grid})"

    def _char(self) -> tuple[str, tuple[int, int]]:
        if self.char_analyzer == "char_wb" or (self.char_analyzer is None and not self.unsegmented):
            return "char_wb", (2, 5)
        return "char", (1, 3)

    def vectorizers(self) -> list:
        from sklearn.feature_extraction.text import TfidfVectorizer

        analyzer, ngrams = self._char()
        char = TfidfVectorizer(
            analyzer=analyzer, ngram_range=ngrams, sublinear_tf=True, max_features=MAX_CHAR_FEATURES, dtype=np.float32
        )
        if analyzer == "char":
            return [char]
        return [
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, max_features=MAX_WORD_FEATURES, dtype=np.float32),
            char,
        ]


class WordNgramCounts:
    """A char_wb vectorizer's counts, the matrix scikit-learn's CountVectorizer makes, with each distinct word's
    n-grams built and looked up once: its char_wb n-grams never span two words, and scikit-learn builds and
    looks up every n-gram of every word in Python (about 90 % of a TF-IDF prediction's time), while a file's
    words repeat. At most `limit` words are kept (then the cache starts again)."""

    def __init__(self, vectorizer, *, limit: int = 200_000):
        self.vectorizer, self.limit, self.ids = vectorizer, limit, {}

    def _word_ids(self, word: str) -> array:
        ids = self.ids.get(word)
        if ids is None:
            if len(self.ids) >= self.limit:
                self.ids.clear()
            vocabulary = self.vectorizer.vocabulary_
            ids = self.ids[word] = array(
                "i", [vocabulary[g] for g in self.vectorizer._char_wb_ngrams(word) if g in vocabulary]
            )
        return ids

    def counts(self, texts: list[str]):
        from scipy.sparse import csr_matrix

        preprocess = self.vectorizer.build_preprocessor()  # lowercasing, as its analyzer does first
        cols, lengths = array("i"), np.zeros(len(texts), dtype=np.int64)
        for row, text in enumerate(texts):
            start = len(cols)
            for word in preprocess(text).split():  # the words _char_wb_ngrams splits the text into
                cols.extend(self._word_ids(word))
            lengths[row] = len(cols) - start
        rows = np.repeat(np.arange(len(texts)), lengths)
        shape = (len(texts), len(self.vectorizer.vocabulary_))
        x = csr_matrix((np.ones(len(cols), dtype=self.vectorizer.dtype), (rows, np.frombuffer(cols, np.int32))), shape)
        x.sum_duplicates()  # a word's n-gram counted as often as it occurs
        x.sort_indices()
        return x

    def transform(self, texts: list[str]):
        """What the vectorizer's own `transform(texts)` returns (its tf-idf weighting of those counts)."""
        return self.vectorizer._tfidf.transform(self.counts(texts), copy=False)


def _stack(blocks):
    from scipy.sparse import hstack

    return hstack(blocks).tocsr() if len(blocks) > 1 else blocks[0].tocsr()


@dataclass
class TfidfModel:
    """A fitted baseline: vectorizers (vocabulary + idf) and one (coef, intercept) per label."""

    labels: list[str]
    multi_label: bool
    vectorizers: list
    coef: np.ndarray  # (labels, features)
    intercept: np.ndarray  # (labels,)
    c: float
    description: str
    thresholds: np.ndarray | None = None  # multi-label, tuned on the validation rows
    fit_s: float = 0.0
    word_counts: dict = field(default_factory=dict, repr=False, compare=False)  # vectorizer index -> WordNgramCounts

    def features(self, texts: list[str]):
        # stripped as the trainer's rows are (trainer.data.labelled): a served text's spaces make no n-grams it
        # never saw
        stripped = [t.strip() for t in texts]
        return _stack([self._transform(i, v, stripped) for i, v in enumerate(self.vectorizers)])

    def _transform(self, index: int, vectorizer, texts: list[str]):
        if vectorizer.analyzer != "char_wb":
            return vectorizer.transform(texts)
        if index not in self.word_counts:
            self.word_counts[index] = WordNgramCounts(vectorizer)
        return self.word_counts[index].transform(texts)

    def probabilities(self, texts: list[str], x=None) -> np.ndarray:
        """(rows, labels): per-label sigmoids, normalised over the labels for single-label data."""
        x = self.features(texts) if x is None else x
        logits = np.asarray(x @ self.coef.T, dtype=np.float64) + self.intercept
        probs = 1.0 / (1.0 + np.exp(-np.clip(logits, -50, 50)))
        if not self.multi_label:
            probs = probs / np.maximum(probs.sum(axis=1, keepdims=True), 1e-12)
        return probs

    def save(self) -> dict[str, bytes]:
        """{"tfidf.json": spec + vocabularies, "tfidf.npz": idf, coef, intercept}: nothing to unpickle."""
        spec = {
            "format": FORMAT,
            "labels": self.labels,
            "multi_label": self.multi_label,
            "c": self.c,
            "description": self.description,
            "thresholds": None if self.thresholds is None else [float(t) for t in self.thresholds],
            "vectorizers": [
                {
                    "analyzer": v.analyzer,
                    "ngram_range": list(v.ngram_range),
                    "vocabulary": sorted(v.vocabulary_, key=v.vocabulary_.get),
                }
                for v in self.vectorizers
            ],
        }
        arrays = {f"idf_{i}": v.idf_.astype(np.float32) for i, v in enumerate(self.vectorizers)}
        buf = io.BytesIO()
        np.savez_compressed(buf, coef=self.coef.astype(np.float32), intercept=self.intercept, **arrays)
        return {"tfidf.json": json.dumps(spec, ensure_ascii=False).encode(), "tfidf.npz": buf.getvalue()}

    @classmethod
    def load(cls, spec_json: bytes, arrays_npz: bytes) -> "TfidfModel":
        from sklearn.feature_extraction.text import TfidfVectorizer

        spec = json.loads(spec_json)
        if spec.get("format") != FORMAT:
            raise ValueError(f"tfidf.json: unknown format {spec.get('format')!r} (expected {FORMAT})")
        arrays = np.load(io.BytesIO(arrays_npz), allow_pickle=False)
        vectorizers = []
        for i, v in enumerate(spec["vectorizers"]):
            vec = TfidfVectorizer(
                analyzer=v["analyzer"],
                ngram_range=tuple(v["ngram_range"]),
                sublinear_tf=True,
                vocabulary={term: j for j, term in enumerate(v["vocabulary"])},
                dtype=np.float32,
            )
            vec.idf_ = arrays[f"idf_{i}"]
            vectorizers.append(vec)
        thresholds = spec.get("thresholds")
        return cls(
            spec["labels"],
            spec["multi_label"],
            vectorizers,
            arrays["coef"],
            arrays["intercept"],
            spec["c"],
            spec["description"],
            None if thresholds is None else np.array(thresholds),
        )


def _fit_labels(x, targets: np.ndarray, c: float, class_weight, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.linear_model import LogisticRegression

    coef = np.zeros((targets.shape[1], x.shape[1]), dtype=np.float32)
    intercept = np.zeros(targets.shape[1])
    for j in range(targets.shape[1]):
        y = targets[:, j]
        if y.min() == y.max():  # a label every (or no) training row has: a constant
            intercept[j] = 20.0 if y.min() else -20.0
            continue
        # One binary liblinear fit per label: on sparse n-gram features with many labels it is ~5x
        # faster than a multinomial lbfgs fit at the same macro-F1 (60 labels, long texts: 13 s vs 65 s).
        lr = LogisticRegression(C=c, solver="liblinear", class_weight=class_weight, random_state=seed)
        lr.fit(x, y)
        coef[j], intercept[j] = lr.coef_[0], lr.intercept_[0]
    return coef, intercept


def fit_tfidf(
    texts: list[str],
    targets: np.ndarray,
    *,
    train_idx: list[int],
    valid_idx: list[int],
    multi_label: bool,
    labels: list[str],
    spec: TfidfSpec,
    seed: int = 0,
    allow_empty: bool = False,
    threshold_policy: str = M.DEFAULT_POLICY,
) -> TfidfModel:
    """Fitted on the training rows; C (when the spec has several) and thresholds chosen on the validation rows."""
    started = time.perf_counter()
    vectorizers = spec.vectorizers()
    train_texts = [texts[i] for i in train_idx]
    x_train = _stack([v.fit_transform(train_texts) for v in vectorizers])
    valid_texts = [texts[i] for i in valid_idx]
    x_valid = _stack([v.transform(valid_texts) for v in vectorizers])
    best, best_key = None, None
    c_grid = spec.c_grid if len(valid_idx) >= MIN_ROWS_TO_CHOOSE_C else (spec.fixed_c,)
    for c in c_grid:
        coef, intercept = _fit_labels(x_train, targets[train_idx], c, spec.class_weight, seed)
        model = TfidfModel(labels, multi_label, vectorizers, coef, intercept, c, spec.describe())
        if len(c_grid) == 1:
            best = model
            break
        probs = model.probabilities(valid_texts, x_valid)
        pred = M.decide(probs, multi_label=multi_label, thresholds=np.full(len(labels), 0.5), allow_empty=allow_empty)
        s = M.score(pred, targets[valid_idx], labels)
        key = (s["macro_f1"] + s["micro_f1"], -abs(np.log(c / DEFAULT_C)))  # ties: nearest the default
        if best_key is None or key > best_key:
            best, best_key = model, key
    if multi_label:
        best.thresholds = M.choose_thresholds(
            best.probabilities(valid_texts, x_valid), targets[valid_idx], threshold_policy
        )
    best.fit_s = round(time.perf_counter() - started, 2)
    return best


def tfidf_baseline(
    texts: list[str],
    targets: np.ndarray,
    *,
    train_idx: list[int],
    valid_idx: list[int],
    test_idx: list[int] | None = None,
    multi_label: bool,
    labels: list[str],
    seed: int = 0,
    allow_empty: bool = False,
    spec: TfidfSpec | None = None,
    model: TfidfModel | None = None,
) -> dict:
    """Fitted on train (or `model`, already fitted so), thresholds tuned on valid, scored on test when
    given (else on valid); the model's metric shape plus `fit_s`, `model` and `c`."""
    scored = test_idx or valid_idx
    if model is None:
        model = fit_tfidf(
            texts,
            targets,
            train_idx=train_idx,
            valid_idx=valid_idx,
            multi_label=multi_label,
            labels=labels,
            spec=spec or TfidfSpec(),
            seed=seed,
            allow_empty=allow_empty,
        )
    probs = model.probabilities([texts[i] for i in scored])
    pred = M.decide(probs, multi_label=multi_label, thresholds=model.thresholds, allow_empty=allow_empty)
    result = M.score(pred, targets[scored], labels, model.thresholds)
    return {**result, "fit_s": model.fit_s, "model": model.description, "c": model.c}
