"""Classifier parts the stages use: the probe (probe.py), the recipe (recipe.py), figures (metrics.py,
plots.py), and what the model is judged against or blended with (baseline.py, blend.py, ensemble.py)."""
