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
    compute_capability: float  # NVIDIA's; the trainer image's CUDA 13 needs IMAGE_MIN_CAPABILITY
    gpu_family: str = ""  # its `gpu_family` in the family quota (FAMILY_METRIC), where that quota counts it

    @property
    def spot_metric(self) -> str:
        return f"PREEMPTIBLE_{self.metric}"


GPU_TYPES: dict[str, GpuType] = {g.name: g for g in (
    GpuType("nvidia-l4", "NVIDIA_L4_GPUS", ("g2-",), (1, 2, 4, 8), 8.9),
    GpuType("nvidia-tesla-a100", "NVIDIA_A100_GPUS", ("a2-highgpu-", "a2-megagpu-"), (1, 2, 4, 8, 16), 8.0),
    GpuType("nvidia-a100-80gb", "NVIDIA_A100_80GB_GPUS", ("a2-ultragpu-",), (1, 2, 4, 8), 8.0),
    GpuType("nvidia-h100-80gb", "NVIDIA_H100_GPUS", ("a3-highgpu-",), (1, 2, 4, 8), 9.0, "NVIDIA_H100"),
    GpuType("nvidia-h100-mega-80gb", "NVIDIA_H100_MEGA_GPUS", ("a3-megagpu-",), (8,), 9.0, "NVIDIA_H100_MEGA"),
    GpuType("nvidia-h200-141gb", "NVIDIA_H200_GPUS", ("a3-ultragpu-",), (8,), 9.0, "NVIDIA_H200"),
    GpuType("nvidia-tesla-t4", "NVIDIA_T4_GPUS", ("n1-",), (1, 2, 4), 7.5),
    GpuType("nvidia-tesla-v100", "NVIDIA_V100_GPUS", ("n1-",), (1, 2, 4, 8), 7.0),
    GpuType("nvidia-tesla-p100", "NVIDIA_P100_GPUS", ("n1-",), (1, 2, 4), 6.0),
    GpuType("nvidia-tesla-p4", "NVIDIA_P4_GPUS", ("n1-",), (1, 2, 4), 6.1),
)}

# The trainer image's torch is built for CUDA 13.0 (images/trainer/Dockerfile), which removed
# support for compute capability below 7.5 (Maxwell, Pascal, Volta: V100, P100, P4) and needs an
# NVIDIA driver of branch 580 or newer. Sources (read 2026-11-27): the CUDA 13.0 toolkit release
# notes, https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/ ("Deprecated architectures"), and
# NVIDIA's compatibility table, https://docs.nvidia.com/deploy/cuda-compatibility/.
IMAGE_CUDA = "13.0"
IMAGE_MIN_CAPABILITY = 7.5
IMAGE_MIN_DRIVER = 580
CUDA_NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/"
CUDA_COMPATIBILITY = "https://docs.nvidia.com/deploy/cuda-compatibility/"

# G2 machine types fix their L4 count; A2/A3 spell it in the name (a2-highgpu-4g).
G2_GPUS = {"g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1, "g2-standard-16": 1,
           "g2-standard-24": 2, "g2-standard-32": 1, "g2-standard-48": 4, "g2-standard-96": 8}
ATTACHED_IN_NAME = re.compile(r"^a[23]-\w+-(\d+)g$")

GLOBAL_METRIC = "GPUS_ALL_REGIONS"
# Newer GPUs (H100, H200, B200) have no per-GPU metric in regions.get: Cloud Quotas counts them under one
# quota per region with a `gpu_family` dimension, GPUS-PER-GPU-FAMILY-per-project-region, and Spot ones
# under PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region (quota_id() of these names). Source: Cloud
# Quotas, "Implement common use cases: get quota info for a service specific dimension", FAMILY_QUOTA_DOC.
FAMILY_METRIC = "GPUS_PER_GPU_FAMILY"
SPOT_FAMILY_METRIC = f"PREEMPTIBLE_{FAMILY_METRIC}"
FAMILY_QUOTA_DOC = "https://cloud.google.com/docs/quotas/implement-common-use-cases"


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
    if gpu.compute_capability < IMAGE_MIN_CAPABILITY:
        return (f"{gpu_type} (compute capability {gpu.compute_capability}) cannot run the trainer image: its CUDA "
                f"{IMAGE_CUDA} supports compute capability {IMAGE_MIN_CAPABILITY} and newer ({CUDA_NOTES}); "
                "pick nvidia-tesla-t4 on n1-*, or nvidia-l4 on g2-*")
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


# ---------------------------------------------------------------- boot images per machine series
#
# Which boot images a series' GPUs work with and the image every shipped env uses. Sources were
# read on the date given; re-check them when a series or the trainer image's CUDA changes (the
# image's torch is built for CUDA 13: driver >= 580, IMAGE_MIN_DRIVER; the VM agent refuses an
# older driver before the trainer starts, trainer/launchers/vm/hardware.py).
#
# | series | GPUs      | min. driver (GPU) | refused boot images    | default boot image
# |--------|-----------|-------------------|------------------------|------------------------------------------
# | g2     | L4        | 525.60.13         | Deep Learning VM (any) | cos-cloud cos-stable + cos-extensions driver
# | a2     | A100      | 450.80.02         | -                      | cos-cloud cos-stable + cos-extensions driver
# | a3     | H100/H200 | 525.60.13         | -                      | cos-cloud cos-121-lts + cos-extensions driver
# | n1     | T4        | 410.79            | -                      | cos-cloud cos-stable + cos-extensions driver
#
# Container-Optimized OS everywhere (issue 38): it ships Docker (the start-up script's only host
# dependency) and `cos-extensions` installs a signed driver for every GPU above (COS_GPU_DRIVERS
# lists them; GKE runs its A2/A3/G2/N1 GPU nodes on COS). The Deep Learning VM family booted
# before on A2/A3/N1 carried no written source for Docker, and these VMs have no external IP to
# install it. A user-chosen `boot_image` must bring Docker and the NVIDIA container toolkit.
# Sources (read 2026-11-25 and 2026-11-27): g2 https://cloud.google.com/compute/docs/accelerator-optimized-machines#g2-limitations;
# driver minimums https://cloud.google.com/compute/docs/gpus/install-drivers-gpu;
# COS GPUs https://cloud.google.com/container-optimized-os/docs/how-to/run-gpus.
#
# A3 pins the COS 121 LTS family instead of the floating cos-stable: the COS release notes, milestone 125
# (COS_M125_NOTES, quoted by the review of 2026-11-27), warn of "known performance and functional issues on
# a3-highgpu" and recommend milestone 121; cos-stable moves to a new milestone without notice.
#
# Container-Optimized OS has no NVIDIA container toolkit: the start-up script installs the
# driver with `cos-extensions install gpu -- -version=<gpu_driver>` and mounts it into the
# container. Its drivers are signed, so Secure Boot stays on; a Deep Learning VM installs an
# unsigned-by-default driver at first boot, so Secure Boot stays off there.

DLVM_IMAGES = "projects/deeplearning-platform-release/"
COS_IMAGES = "projects/cos-cloud/"
DLVM_IMAGE = f"{DLVM_IMAGES}global/images/family/common-cu129-ubuntu-2204-nvidia-580"
COS_IMAGE = f"{COS_IMAGES}global/images/family/cos-stable"
COS_121_LTS_IMAGE = f"{COS_IMAGES}global/images/family/cos-121-lts"
COS_M125_NOTES = "https://cloud.google.com/container-optimized-os/docs/release-notes/m125"
ACCELERATOR_MACHINES = "https://cloud.google.com/compute/docs/accelerator-optimized-machines"
G2_LIMITATIONS = f"{ACCELERATOR_MACHINES}#g2-limitations"
# The versions `cos-extensions install gpu -- -version=` documents: default, latest, an exact
# driver version, or a driver branch (R580; cos-gpu-installer >= 2.2.1).
COS_GPU_DRIVERS = "https://cloud.google.com/container-optimized-os/docs/how-to/run-gpus"
DRIVER_FORM = re.compile(r"default|latest|\d{3}\.\d+(\.\d+)?|R\d{3}")


@dataclass(frozen=True)
class SeriesImages:
    """Boot images and driver needs of one machine series (see the table above)."""

    series: str  # machine-type prefix without the dash: g2, a2, a3, n1
    gpus: str
    min_driver: str
    default_image: str
    refused: tuple[tuple[str, str], ...]  # (image prefix, why) known not to work
    source: str
    read_on: str = "2026-11-25"


SERIES_IMAGES: dict[str, SeriesImages] = {s.series: s for s in (
    SeriesImages("g2", "L4", "525.60.13", COS_IMAGE,
                 ((DLVM_IMAGES, "Deep Learning VM images cannot be the boot disk of G2 VMs"),), G2_LIMITATIONS),
    SeriesImages("a2", "A100", "450.80.02", COS_IMAGE, (), COS_GPU_DRIVERS, "2026-11-27"),
    SeriesImages("a3", "H100/H200", "525.60.13", COS_121_LTS_IMAGE, (), COS_M125_NOTES, "2026-11-27"),
    SeriesImages("n1", "T4", "410.79", COS_IMAGE, (), COS_GPU_DRIVERS, "2026-11-27"),
)}


def series_of(machine_type: str) -> SeriesImages | None:
    """The catalogue row of a machine type (g2-standard-8 -> g2), None for series without GPUs here."""
    return SERIES_IMAGES.get(machine_type.split("-", 1)[0])


def default_boot_image(machine_type: str) -> str:
    """The boot image a language gets when it sets none: its series' default."""
    row = series_of(machine_type)
    return row.default_image if row else COS_IMAGE


def boot_image_problem(machine_type: str, boot_image: str) -> str | None:
    """Why `boot_image` cannot boot `machine_type` with its GPUs (naming the doc), or None."""
    row = series_of(machine_type)
    image = boot_image.removeprefix("https://www.googleapis.com/compute/v1/")
    for prefix, why in row.refused if row else ():
        if image.startswith(prefix):
            return (f"boot image {boot_image!r} cannot run {machine_type}: {why} ({row.source}, read {row.read_on}); "
                    f"use e.g. {row.default_image}")
    return None


# ---------------------------------------------------------------- machine types that refuse a setting
#
# Limits of accelerator-optimized machine types that Compute Engine enforces only when the VM is
# created (so `terraform apply` or the group's first VM would fail after money and minutes are
# spent). Source: the accelerator-optimized machines page (ACCELERATOR_MACHINES, "updated
# 2026-04-13", read 2026-11-25): A3 Ultra boots only from Hyperdisk Balanced; A3 High with 1, 2 or
# 4 GPUs is offered as Spot or Flex-start only (no on-demand VMs).

@dataclass(frozen=True)
class MachineLimit:
    """A setting some machine types refuse at creation time."""

    pattern: str  # regular expression over the machine type
    disk_types: tuple[str, ...] = ()  # boot disk types it accepts (empty: any)
    refused_disks: tuple[str, ...] = ()  # boot disk types it refuses
    spot_only: bool = False  # on-demand VMs are not offered (Spot or Flex-start only)
    source: str = ACCELERATOR_MACHINES
    read_on: str = "2026-11-25"


MACHINE_LIMITS = (
    # "Standard Persistent Disk (pd-standard) isn't supported on instances that use the G2 machine type."
    MachineLimit(r"g2-standard-\d+", refused_disks=("pd-standard",), source=G2_LIMITATIONS, read_on="2026-11-27"),
    MachineLimit(r"a3-ultragpu-\w+", disk_types=("hyperdisk-balanced",)),
    MachineLimit(r"a3-highgpu-[124]g", spot_only=True),
)


def machine_limit_problems(machine_type: str, *, disk_type: str, spot: bool) -> list[tuple[str, str]]:
    """(setting, why) for each setting `machine_type` refuses at VM creation, naming the page."""
    problems = []
    for limit in MACHINE_LIMITS:
        if not re.fullmatch(limit.pattern, machine_type):
            continue
        cited = f"({limit.source}, read {limit.read_on})"
        if limit.disk_types and disk_type not in limit.disk_types:
            problems.append(("disk_type", f"{machine_type} boots only from {' or '.join(limit.disk_types)} disks, "
                                          f"not {disk_type} {cited}; set disk_type: {limit.disk_types[0]}"))
        if disk_type in limit.refused_disks:
            problems.append(("disk_type", f"{machine_type} cannot boot from {disk_type} disks {cited}; "
                                          "set disk_type: pd-balanced"))
        if limit.spot_only and not spot:
            problems.append(("spot", f"{machine_type} is offered as Spot or Flex-start only, not on-demand {cited}; "
                                     "set spot: true, or pick a3-highgpu-8g for on-demand"))
    return problems


def installs_driver_at_boot(boot_image: str) -> bool:
    """Container-Optimized OS: the start-up script installs the driver (cos-extensions)."""
    return boot_image.removeprefix("https://www.googleapis.com/compute/v1/").startswith(COS_IMAGES)


def signed_driver(boot_image: str) -> bool:
    """Whether the image's NVIDIA driver loads under Secure Boot (COS signs its drivers)."""
    return installs_driver_at_boot(boot_image)
