"""How the local target starts a trainer: the supervisor (`python -m trainer.launchers.local.supervisor`: start,
watch, restart on a crash, stop at max_run_hours, write the final status) and the project's ledger of CPU
cores that local runs side by side share (cores.py). On gcp the VM agent (trainer/launchers/vm/) does this job."""
