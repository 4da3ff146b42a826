"""The pyfunc model's code file (MLflow "models from code"): loading the model runs this, nothing is unpickled."""
import mlflow.models

from trainer.serving.mlflow_pyfunc import TrainstackClassifier

mlflow.models.set_model(TrainstackClassifier())
