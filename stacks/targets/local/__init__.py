"""The local target: runs on this machine, the bucket a folder (target.py: LocalTarget)."""
