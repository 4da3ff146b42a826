"""The classification stage's companions: baselines the model is judged against."""
