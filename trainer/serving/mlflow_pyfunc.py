"""A run's model as an MLflow pyfunc: `mlflow.pyfunc.load_model("models:/trainstack-fr@champion").predict(df)`
returns each text's labels (a list of strings), per-label probabilities (doubles) and `error`: why a row was
not classified (no text, an empty one, a value that is not text), None for the rows that were.

Logged with a copy of this package as its code, so the serving side needs MLflow and the pinned
requirements, not trainctl. The copy is renamed `trainer_<hash of the code>` (trainer/serving/model_code.py):
models exported from different trees load side by side in one process, each running its own code. It
decides as `trainctl predict` does, with the same ServedModel (trainer/serving/served_model.py).
"""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc
import numpy as np
import pandas as pd

TEXT_COLUMN = "text"
LABELS, ERROR = "labels", "error"


def prob_column(label: str) -> str:
    return f"prob_{label}"


def unclassifiable(value) -> str | None:
    """Why `value` is not a text to classify, or None when it is one."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "no text (null)"
    if not isinstance(value, str):
        return f"not text ({type(value).__name__})"
    if not value.strip():
        return "empty text"
    return None


class TrainstackClassifier(mlflow.pyfunc.PythonModel):
    """Texts in (a `text` column, or the only column), labels and per-label probabilities out."""

    def load_context(self, context):
        from trainer.serving.served_model import ServedModel

        # the artifacts are the run's files, named as in its folder (stacks/tracking/model.py logs them)
        self.served = ServedModel.load(files={name: Path(path) for name, path in context.artifacts.items()})

    # typed: MLflow checks nothing against pandas hints (the logged signature does), and stops advising them
    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame({TEXT_COLUMN: model_input})
        column = TEXT_COLUMN if TEXT_COLUMN in frame.columns else frame.columns[0]
        values = frame[column].tolist()
        errors = [unclassifiable(value) for value in values]
        rows = [i for i, error in enumerate(errors) if error is None]
        chosen, probs = self.served.predict([values[i] for i in rows])
        labels: list[list[str]] = [[] for _ in values]
        table = np.full((len(values), len(self.served.labels)), np.nan)
        for row, decided, figures in zip(rows, chosen, probs):
            labels[row], table[row] = list(decided), figures
        out = {LABELS: labels}
        out.update({prob_column(label): table[:, i].astype(float) for i, label in enumerate(self.served.labels)})
        out[ERROR] = pd.Series(errors, dtype=object, index=frame.index)  # None where classified, not NaN
        return pd.DataFrame(out, index=frame.index)
