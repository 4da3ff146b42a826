"""A run's records in the bucket, as both sides read them: where its files live and what status.json holds
(runs.py, stdlib only), metrics.json as a typed document (run_metrics.py), and report.html (run_report.py).
trainctl imports these to list, follow and report runs, so nothing here loads torch or fastai."""
