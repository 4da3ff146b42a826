"""Before the trainer starts on a VM: are the node's GPUs there, under a driver the image can use?

Without this a node whose driver is too old for the image's CUDA (or whose GPUs are missing)
trains on its vCPUs at GPU prices until max_run_hours: torch.cuda.is_available() is then False
and the trainer falls back to the CPU (trainer/runtime/distributed.py). Container-Optimized OS has no
NVIDIA container toolkit, so the image's NVIDIA_REQUIRE_CUDA check never runs there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass

# The image's torch is built for CUDA 13.0: NVIDIA driver branch 580 or newer
# (stacks/targets/gcp/gpus.py IMAGE_MIN_DRIVER; a test keeps the two equal).
MIN_DRIVER = 580
# Container-Optimized OS: startup.sh mounts the host's driver tools here.
NVIDIA_BIN_DIRS = ("/usr/local/nvidia/bin",)
PROBE_ENV = "TRAINSTACK_GPU_PROBE"  # tests: {"gpus": N, "driver": "570.172.08" or null}


@dataclass(frozen=True)
class Hardware:
    """What this node's trainer would see."""

    gpus: int  # CUDA devices torch can use
    driver: str | None  # the NVIDIA driver version nvidia-smi reports; None when none answers


def probe() -> Hardware:
    """This node's GPUs and driver (the PROBE_ENV test double replaces both)."""
    double = os.environ.get(PROBE_ENV)
    if double:
        fake = json.loads(double)
        return Hardware(int(fake["gpus"]), fake.get("driver"))
    return Hardware(_torch_gpus(), _driver_version())


def _torch_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _driver_version() -> str | None:
    path = os.pathsep.join([*NVIDIA_BIN_DIRS, os.environ.get("PATH", "")])
    exe = shutil.which("nvidia-smi", path=path)
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    versions = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return versions[0] if done.returncode == 0 and versions else None


def _major(version: str | None) -> int | None:
    try:
        return int(version.split(".", 1)[0]) if version else None
    except ValueError:
        return None


def driver_not_loaded(hardware: Hardware, expected_gpus: int, min_driver: int = MIN_DRIVER) -> bool:
    """GPUs missing under no driver too old for the image: the node's own failure (a driver install or a GPU that
    did not come up), which another VM may not have; a driver too old is the settings', the same on every VM."""
    major = _major(hardware.driver)
    return hardware.gpus < expected_gpus and not (major is not None and major < min_driver)


def problem(hardware: Hardware, expected_gpus: int, min_driver: int = MIN_DRIVER) -> str | None:
    """One line naming what was found and the setting to change, or None when the node can train."""
    major = _major(hardware.driver)
    fix_driver = (
        f"set defaults.gcp.gpu_driver to latest, R{min_driver} or a {min_driver}.x version (cos-extensions), "
        "or boot a newer image (gcp.boot_image: the cos-stable family)"
    )
    if major is not None and major < min_driver:
        return (
            f"NVIDIA driver {hardware.driver} on this VM is older than the {min_driver} the trainer image's "
            f"CUDA 13 needs, so training would run on the CPU; {fix_driver}"
        )
    if hardware.gpus < expected_gpus:
        found = f"driver {hardware.driver}" if hardware.driver else "no NVIDIA driver answered nvidia-smi"
        return (
            f"the trainer sees {hardware.gpus} of the {expected_gpus} GPU(s) this node was created with "
            f"({found}), so training would run on the CPU; check the start-up script's driver install in the "
            f"serial console or Cloud Logging, and {fix_driver}"
        )
    return None
