"""A run's model as an MLflow pyfunc: `mlflow.pyfunc.load_model("models:/trainstack-fr@champion").predict(df)`
returns each text's labels (a JSON list) and per-label probabilities.

Logged with a copy of this package as its code, so the serving side needs MLflow and the pinned
requirements, not trainctl. The copy is renamed `trainer_<hash of the code>` (trainer/serving/model_code.py):
models exported from different trees load side by side in one process, each running its own code. It
decides as `trainctl predict` does, with the same ServedModel (trainer/serving/served_model.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow.pyfunc

TEXT_COLUMN = "text"


class TrainstackClassifier(mlflow.pyfunc.PythonModel):
    """Texts in (a `text` column, or the only column), labels and per-label probabilities out."""

    def load_context(self, context):
        from trainer.serving.served_model import ServedModel

        # the artifacts are the run's files, named as in its folder (stacks/tracking/model.py logs them)
        self.served = ServedModel.load(files={name: Path(path) for name, path in context.artifacts.items()})

    def predict(self, context, model_input, params=None):
        import pandas as pd

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame({TEXT_COLUMN: model_input})
        column = TEXT_COLUMN if TEXT_COLUMN in frame.columns else frame.columns[0]
        texts = ["" if text is None else str(text) for text in frame[column].tolist()]
        chosen, probs = self.served.predict(texts)
        out = {"labels": [json.dumps(row, ensure_ascii=False) for row in chosen]}
        out.update({f"prob_{label}": probs[:, i].astype(float) for i, label in enumerate(self.served.labels)})
        return pd.DataFrame(out, index=frame.index)
