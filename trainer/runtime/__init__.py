"""The machinery every stage runs on, one concern per module: context.py (a run's arguments, bucket, scratch
folder), fitting.py (fits in phases with exact resume), checkpoints.py, callbacks/ (status, progress,
checkpoints, best epoch, heap trim), preemption.py (SIGTERM), precision.py, runlog.py (log.txt and
status.json), distributed.py (ranks under torchrun), heap.py."""
