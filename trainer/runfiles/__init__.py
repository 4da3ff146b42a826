"""A run's files in the bucket, as both sides read them: where they live and the names both sides share
(keys.py), status.json (status_file.py), metrics.json as a typed document (metrics_file.py), reading them
back (readers.py), run ids (run_ids.py), the times and durations they write and show (timestamps.py,
durations.py), what metadata/placements.json comes to (placements.py), report.html (report_html.py), and the
figures' names and steps TensorBoard and MLflow share (curves.py; events.py writes trainctl's to TensorBoard),
the run's own copy of its data (data_copy.py).
trainctl imports these to list, follow and report runs, so nothing here loads torch."""
