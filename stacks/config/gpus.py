"""What Compute Engine offers: GPU types, the machine families that carry them, quota metrics.

Kept as plain data (no cloud calls) so config validation can reject an
impossible request before anything is synthesized or billed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuType:
    """One accelerator type as Compute Engine names it."""

    name: str
    metric: str  # regional quota metric of on-demand GPUs; Spot adds the PREEMPTIBLE_ prefix
    families: tuple[str, ...]  # machine-type prefixes that can attach it
    counts: tuple[int, ...]  # valid per-VM counts where the machine type does not fix it

    @property
    def spot_metric(self) -> str:
        return f"PREEMPTIBLE_{self.metric}"


GPU_TYPES: dict[str, GpuType] = {g.name: g for g in (
    GpuType("nvidia-l4", "NVIDIA_L4_GPUS", ("g2-",), (1, 2, 4, 8)),
    GpuType("nvidia-tesla-a100", "NVIDIA_A100_GPUS", ("a2-highgpu-", "a2-megagpu-"), (1, 2, 4, 8, 16)),
    GpuType("nvidia-a100-80gb", "NVIDIA_A100_80GB_GPUS", ("a2-ultragpu-",), (1, 2, 4, 8)),
    GpuType("nvidia-h100-80gb", "NVIDIA_H100_GPUS", ("a3-highgpu-",), (1, 2, 4, 8)),
    GpuType("nvidia-h100-mega-80gb", "NVIDIA_H100_MEGA_GPUS", ("a3-megagpu-",), (8,)),
    GpuType("nvidia-h200-141gb", "NVIDIA_H200_GPUS", ("a3-ultragpu-",), (8,)),
    GpuType("nvidia-tesla-t4", "NVIDIA_T4_GPUS", ("n1-",), (1, 2, 4)),
    GpuType("nvidia-tesla-v100", "NVIDIA_V100_GPUS", ("n1-",), (1, 2, 4, 8)),
    GpuType("nvidia-tesla-p100", "NVIDIA_P100_GPUS", ("n1-",), (1, 2, 4)),
    GpuType("nvidia-tesla-p4", "NVIDIA_P4_GPUS", ("n1-",), (1, 2, 4)),
)}

# G2 machine types fix their L4 count; A2/A3 spell it in the name (a2-highgpu-4g).
G2_GPUS = {"g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1, "g2-standard-16": 1,
           "g2-standard-24": 2, "g2-standard-32": 1, "g2-standard-48": 4, "g2-standard-96": 8}
ATTACHED_IN_NAME = re.compile(r"^a[23]-\w+-(\d+)g$")

GLOBAL_METRIC = "GPUS_ALL_REGIONS"


def fixed_gpu_count(machine_type: str) -> int | None:
    """GPUs a machine type comes with (accelerator-optimized families), else None."""
    if machine_type in G2_GPUS:
        return G2_GPUS[machine_type]
    match = ATTACHED_IN_NAME.match(machine_type)
    return int(match.group(1)) if match else None


def gpu_problem(gpu_type: str | None, count: int, machine_type: str) -> str | None:
    """Why this GPU request cannot run on this machine type, or None when it can."""
    if not gpu_type or count == 0:
        return "a GPU is required on target gcp: set gpu.type and gpu.count >= 1"
    gpu = GPU_TYPES.get(gpu_type)
    if gpu is None:
        return f"unknown GPU type {gpu_type!r}; known: {', '.join(sorted(GPU_TYPES))}"
    if not machine_type.startswith(gpu.families):
        wanted = " or ".join(f"{f}*" for f in gpu.families)
        return f"{gpu_type} attaches only to {wanted} machine types, not {machine_type!r}"
    fixed = fixed_gpu_count(machine_type)
    if fixed is not None and fixed != count:
        return f"{machine_type} comes with {fixed} x {gpu_type}; set gpu.count to {fixed} (got {count})"
    if fixed is None and count not in gpu.counts:
        return f"{gpu_type} comes in counts of {', '.join(map(str, gpu.counts))} per VM (got {count})"
    return None


def region_of(zone: str) -> str:
    """us-central1-a -> us-central1."""
    return zone.rsplit("-", 1)[0]
