"""The pyfunc model's code file (MLflow "models from code"): loading the model runs the logged copy of this
file, whose import names the model's own code package (model_code.py); the pyfunc itself is not pickled."""

import mlflow.models

from trainer.serving.mlflow_pyfunc import TrainstackClassifier

mlflow.models.set_model(TrainstackClassifier())
