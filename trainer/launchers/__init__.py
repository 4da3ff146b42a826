"""What starts the trainer and owns its process, side by side: local/ (the local target's supervisor and core
ledger) and vm/ (the agent in a GCP VM's container). Both follow interruptions.py (what resumes a run, how
many times) and trainer_process.py (the trainer's command, the SIGTERM grace)."""
