"""The pyfunc model's code file (MLflow "models from code"): loading the model runs the logged copy of this
file, whose import names the model's own code package (model_code.py); the pyfunc itself is not pickled.

The package comes zipped (`code/trainer_<hash>.zip`, the model's only code archive): MLflow puts `code/` on
sys.path, this file puts the zip there, before the import. While MLflow saves the model, the package is a
folder already importable (model_code.importable): no `code/` beside this file.
"""

import sys
from pathlib import Path

import mlflow.models

for archive in sorted((Path(__file__).resolve().parent / "code").glob("trainer_*.zip")):
    if str(archive) not in sys.path:
        sys.path.insert(0, str(archive))

from trainer.serving.mlflow_pyfunc import TrainstackClassifier  # noqa: E402 - from the zip put on sys.path

mlflow.models.set_model(TrainstackClassifier())
