"""What Compute Engine offers: GPU types, the machine families that carry them, quota metrics, boot images.

The facts are data in catalogue.yaml (each with its page and the day it was read), loaded and checked by
catalogue.py; this module names them for the rest of the code and decides with them, without cloud calls,
so config validation can reject an impossible request before anything is synthesized or billed.
"""

from __future__ import annotations

import re

from stacks.targets.gcp.catalogue import GpuType, MachineLimit, MachineSeries, load

CATALOGUE = load()
GPU_TYPES: dict[str, GpuType] = CATALOGUE.gpu_types

# The trainer image's torch is built for CUDA 13.0 (images/trainer/Dockerfile), which removed
# support for compute capability below 7.5 (Maxwell, Pascal, Volta: V100, P100, P4) and needs an
# NVIDIA driver of branch 580 or newer. Sources (read 2026-11-27): the CUDA 13.0 toolkit release
# notes, https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/ ("Deprecated architectures"), and
# NVIDIA's compatibility table, https://docs.nvidia.com/deploy/cuda-compatibility/.
IMAGE_CUDA = "13.0"
IMAGE_MIN_CAPABILITY = 7.5
IMAGE_MIN_DRIVER = 580
CUDA_NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/"

# G2 machine types fix their L4 count; A2/A3 spell it in the name (a2-highgpu-4g).
G2_GPUS = CATALOGUE.gpus_per_machine
ATTACHED_IN_NAME = re.compile(r"^a[23]-\w+-(\d+)g$")

GLOBAL_METRIC = CATALOGUE.global_metric
# Newer GPUs (H100, H200, B200) have no per-GPU metric in regions.get: Cloud Quotas counts them under one
# quota per region with a `gpu_family` dimension, GPUS-PER-GPU-FAMILY-per-project-region, and Spot ones
# under PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region (quota_id() of these names); the catalogue's
# family-quotas source says where.
FAMILY_METRIC = CATALOGUE.family_metric
SPOT_FAMILY_METRIC = f"{CATALOGUE.spot_prefix}{FAMILY_METRIC}"


def fixed_gpu_count(machine_type: str) -> int | None:
    """GPUs a machine type comes with (accelerator-optimized families), else None."""
    if machine_type in G2_GPUS:
        return G2_GPUS[machine_type]
    match = ATTACHED_IN_NAME.match(machine_type)
    return int(match.group(1)) if match else None


def gpu_problem(gpu_type: str | None, count: int, machine_type: str) -> str | None:
    """Why this GPU request cannot run on this machine type, or None when it can."""
    if not gpu_type or count == 0:
        return "a GPU is required on target gcp: set gcp.gpu.type and gcp.gpu.count >= 1"
    gpu = GPU_TYPES.get(gpu_type)
    if gpu is None:
        return f"unknown GPU type {gpu_type!r}; known: {', '.join(sorted(GPU_TYPES))}"
    if gpu.compute_capability < IMAGE_MIN_CAPABILITY:
        return (
            f"{gpu_type} (compute capability {gpu.compute_capability}) cannot run the trainer image: its CUDA "
            f"{IMAGE_CUDA} supports compute capability {IMAGE_MIN_CAPABILITY} and newer ({CUDA_NOTES}); "
            "pick nvidia-tesla-t4 on n1-*, or nvidia-l4 on g2-*"
        )
    if not machine_type.startswith(gpu.families):
        wanted = " or ".join(f"{f}*" for f in gpu.families)
        return f"{gpu_type} attaches only to {wanted} machine types, not {machine_type!r}"
    fixed = fixed_gpu_count(machine_type)
    if fixed is not None and fixed != count:
        return f"{machine_type} comes with {fixed} x {gpu_type}; set gcp.gpu.count to {fixed} (got {count})"
    if fixed is None and count not in gpu.counts:
        return f"{gpu_type} comes in counts of {', '.join(map(str, gpu.counts))} per VM (got {count})"
    return None


def region_of(zone: str) -> str:
    """us-central1-a -> us-central1."""
    return zone.rsplit("-", 1)[0]


# ---------------------------------------------------------------- boot images per machine series
#
# Which boot images a series' GPUs work with and the image every shipped env uses (catalogue.yaml,
# `series` and `images`). Re-check the sources when a series or the trainer image's CUDA changes (the
# image's torch is built for CUDA 13: driver >= 580, IMAGE_MIN_DRIVER; the VM agent refuses an older
# driver before the trainer starts, trainer/launchers/vm/hardware.py).
#
# Container-Optimized OS everywhere: it ships Docker (the start-up script's only host dependency) and
# `cos-extensions` installs a signed driver for every GPU of these series (GKE runs its A2/A3/G2/N1 GPU
# nodes on COS). The Deep Learning VM family booted before on A2/A3/N1 carried no written source for
# Docker, and these VMs have no external IP to install it. A user-chosen `boot_image` must bring Docker
# and the NVIDIA container toolkit. A3 pins the COS 121 LTS family instead of the floating cos-stable
# (the COS milestone 125 release notes warn of issues on a3-highgpu; cos-stable moves without notice).
#
# Container-Optimized OS has no NVIDIA container toolkit: the start-up script installs the
# driver with `cos-extensions install gpu -- -version=<gpu_driver>` and mounts it into the
# container. Its drivers are signed, so Secure Boot stays on; a Deep Learning VM installs an
# unsigned-by-default driver at first boot, so Secure Boot stays off there.

DLVM_IMAGES = CATALOGUE.image_projects["dlvm"]
COS_IMAGES = CATALOGUE.image_projects["cos"]
DLVM_IMAGE = CATALOGUE.images["dlvm-cu129"]
COS_IMAGE = CATALOGUE.images["cos-stable"]
COS_121_LTS_IMAGE = CATALOGUE.images["cos-121-lts"]
G2_LIMITATIONS = CATALOGUE.sources["g2-limitations"].url
# The versions `cos-extensions install gpu -- -version=` documents: default, latest, an exact
# driver version, or a driver branch (R580; cos-gpu-installer >= 2.2.1).
COS_GPU_DRIVERS = CATALOGUE.sources["cos-gpus"].url
DRIVER_FORM = re.compile(r"default|latest|\d{3}\.\d+(\.\d+)?|R\d{3}")

SERIES_IMAGES: dict[str, MachineSeries] = CATALOGUE.series


def series_of(machine_type: str) -> MachineSeries | None:
    """The catalogue's series of a machine type (g2-standard-8 -> g2), None for series without GPUs here;
    its boot images, and with `billed_as` the SKU wording that prices it."""
    return SERIES_IMAGES.get(machine_type.split("-", 1)[0])


def required_nic_type(machine_type: str) -> str | None:
    """The network interface's nic_type the machine series requires (A3: GVNIC), None where any is taken."""
    row = series_of(machine_type)
    return row.nic_type if row else None


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
            return (
                f"boot image {boot_image!r} cannot run {machine_type}: {why} ({row.source}, read {row.read_on}); "
                f"use e.g. {row.default_image}"
            )
    return None


# ---------------------------------------------------------------- machine types that refuse a setting
#
# Limits of accelerator-optimized machine types that Compute Engine enforces only when the VM is
# created (so `terraform apply` or the group's first VM would fail after money and minutes are
# spent): catalogue.yaml's `machine_limits` of each series, with the page and the day it was read.

MACHINE_LIMITS: tuple[MachineLimit, ...] = CATALOGUE.machine_limits


def machine_limit_problems(machine_type: str, *, disk_type: str) -> list[tuple[str, str]]:
    """(setting, why) for each boot disk setting `machine_type` refuses at VM creation, naming the page."""
    problems = []
    for limit in MACHINE_LIMITS:
        if not re.fullmatch(limit.pattern, machine_type):
            continue
        cited = f"({limit.source}, read {limit.read_on})"
        if limit.disk_types and disk_type not in limit.disk_types:
            problems.append(
                (
                    "disk_type",
                    f"{machine_type} boots only from {' or '.join(limit.disk_types)} disks, "
                    f"not {disk_type} {cited}; set gcp.disk_type: {limit.disk_types[0]}",
                )
            )
        if disk_type in limit.refused_disks:
            problems.append(
                (
                    "disk_type",
                    f"{machine_type} cannot boot from {disk_type} disks {cited}; set gcp.disk_type: pd-balanced",
                )
            )
    return problems


def capacity_rung(settings) -> str:
    """The rung a language's VMs are at now: `settings.rung`, except Spot turned off by `spot: false` on settings
    that still list spot first (a run moved on demand by copying spot=False)."""
    return "on_demand" if settings.rung == "spot" and not settings.spot else settings.rung


def rung_problem(machine_type: str, rung: str) -> str | None:
    """Why the capacity rung `rung` (spot, flex_start, on_demand) cannot create `machine_type`, naming the page;
    None where it can."""
    if rung == "on_demand":
        for limit in MACHINE_LIMITS:
            if limit.spot_only and re.fullmatch(limit.pattern, machine_type):
                return (
                    f"{machine_type} is offered as Spot or Flex-start only, not on-demand "
                    f"({limit.source}, read {limit.read_on})"
                )
    if rung == "flex_start":
        row = series_of(machine_type)
        if row is not None and not row.flex_start:
            return (
                f"flex-start does not offer {row.series.upper()} machine types such as {machine_type} "
                f"({row.flex_start_source})"
            )
    return None


def installs_driver_at_boot(boot_image: str) -> bool:
    """Container-Optimized OS: the start-up script installs the driver (cos-extensions)."""
    return boot_image.removeprefix("https://www.googleapis.com/compute/v1/").startswith(COS_IMAGES)


def signed_driver(boot_image: str) -> bool:
    """Whether the image's NVIDIA driver loads under Secure Boot (COS signs its drivers)."""
    return installs_driver_at_boot(boot_image)
