"""A run's files in the bucket, as both sides read them: where they live and what status.json holds
(status_file.py, stdlib only), metrics.json as a typed document (metrics_file.py), report.html
(report_html.py), and the figures' names and steps TensorBoard and MLflow share (curves.py). trainctl imports
these to list, follow and report runs, so nothing here loads torch."""
