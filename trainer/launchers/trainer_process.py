"""How both launchers (local/supervisor.py, vm/agent.py) start and stop the trainer process: its command,
alone or under torchrun, and the grace between SIGTERM and SIGKILL."""

from __future__ import annotations

import sys

GRACE_S = 25  # Spot VMs get ~30 s notice; the local target keeps the same budget.

# The module, not a `torchrun` script that may not be on PATH in the image.
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def one_machine_command(processes: int, tail: list[str]) -> list[str]:
    """`python -m trainer TAIL`, or `processes` ranks of it under torchrun (a VM's GPUs, local gloo ranks).

    Nobody else to wait for; an interrupted run is started again by whoever owns the machine
    (the instance group recreating the VM, the local supervisor), so torchrun never restarts workers.
    """
    if processes == 1:
        return [sys.executable, "-m", "trainer", *tail]
    return [
        *TORCHRUN,
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(processes),
        "--max-restarts",
        "0",
        "-m",
        "trainer",
        *tail,
    ]
