"""Using a trained model: ServedModel (served_model.py) loads a run's files and classifies texts, for
`trainctl predict` (texts, or a whole file in batches: batch_predict.py) and the MLflow pyfunc
(mlflow_pyfunc.py, which carries its code under a name of its own: model_code.py)."""
