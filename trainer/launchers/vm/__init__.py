"""The VM side of a training run on Google Cloud.

`images/trainer/startup.sh` runs on the host at every boot and starts the
trainer image with `python -m trainer.launchers.vm run` (the agent). The agent reads the
run from the instance metadata, runs the trainer (under torchrun for more than
one GPU), forwards SIGTERM from the shutdown script (Spot preemption), rejoins the
rendezvous after an interruption on another node (several VMs), enforces
max_run_hours, makes sure the run ends with a final status, and on node 0
resizes its own managed instance group to 0 so nothing is billed afterwards.
"""

from __future__ import annotations

from datetime import datetime, timezone


def log(message: str) -> None:
    """One timestamped line on stdout (serial console / Cloud Logging)."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"{stamp} trainer.launchers.vm: {message}", flush=True)
