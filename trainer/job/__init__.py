"""The training job's machinery around the stages: its flags (params.py, defined once, read by trainctl's
config too: keep this package's imports light), the run's context and precision, fitting in phases with
exact resume (fitting.py, checkpoints in trainer/checkpoints.py), the fastai callbacks (status, progress,
checkpoint, preemption, heap trim), the run's log and status writer (runlog.py), and the final upload
(artifacts.py). The stages themselves are in text/, lm/ and classification/; pipeline.py sequences them."""
