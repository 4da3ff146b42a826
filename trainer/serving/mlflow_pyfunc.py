"""A run's model as an MLflow pyfunc: `mlflow.pyfunc.load_model("models:/trainstack-fr@champion").predict(df)`.

Logged with this package as its code (`code_paths`), so the serving side needs MLflow and the pinned
requirements, not trainctl. It decides as `trainctl predict` does: the run's own tokenizer (inside
model.pth), its thresholds and kept model (metrics.json: the classifier, or its blend with TF-IDF), and the
forward+backward ensemble when the run has model_bwd.pth.
"""
from __future__ import annotations

import json
from pathlib import Path

import mlflow.pyfunc

TEXT_COLUMN = "text"


class TrainstackClassifier(mlflow.pyfunc.PythonModel):
    """Texts in (a `text` column, or the only column), labels and per-label probabilities out."""

    def load_context(self, context):
        from trainer.runfiles.metrics_file import RunMetrics
        from trainer.serving.predict import load_model, load_tfidf

        files = context.artifacts
        self.metrics = RunMetrics.from_json(Path(files["metrics"]).read_bytes())
        self.learn = load_model(Path(files["model"]))
        self.learn_bwd = load_model(Path(files["model_bwd"])) if "model_bwd" in files else None
        self.tfidf = None
        if self.metrics.blended:
            self.tfidf = load_tfidf(Path(files["tfidf_json"]).read_bytes(), Path(files["tfidf_npz"]).read_bytes())

    def predict(self, context, model_input, params=None):
        import pandas as pd

        from trainer.serving.predict import blended, decide_labels, probabilities

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame({TEXT_COLUMN: model_input})
        column = TEXT_COLUMN if TEXT_COLUMN in frame.columns else frame.columns[0]
        texts = ["" if text is None else str(text) for text in frame[column].tolist()]
        if not texts:
            return pd.DataFrame({"labels": [], **{f"prob_{label}": [] for label in self.metrics.labels}})
        probs = blended(probabilities(self.learn, texts, self.learn_bwd), texts, self.metrics, self.tfidf,
                        backward=self.learn_bwd is not None)
        labels = decide_labels(probs, self.metrics, ensemble=self.learn_bwd is not None)
        out = {"labels": [json.dumps(row, ensure_ascii=False) for row in labels]}
        out.update({f"prob_{label}": probs[:, i].astype(float) for i, label in enumerate(self.metrics.labels)})
        return pd.DataFrame(out, index=frame.index)
