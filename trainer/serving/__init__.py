"""Using a trained model: load model.pth (and a kept TF-IDF blend) and classify texts (predict.py,
`trainctl predict`), or a whole file in batches with progress (batch_predict.py, `trainctl predict --file`)."""
