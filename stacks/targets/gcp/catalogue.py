"""The GPU catalogue (catalogue.yaml: GPU types, machine series, boot images, quota metric ids, the Billing
Catalog's SKU wording, each with its source), read and checked here and nowhere else.

`load()` validates the file's shape with pydantic (unknown keys refused, every field of a GPU type
required), then the references between its parts (a GPU's machine families name a series, a series'
boot image names an image, every part cites a listed source): a bad edit stops the first command that
reads it, naming the entry and field, not a quota check or a price much later. It returns frozen rows.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stacks.errors import ConfigError

CATALOGUE_FILE = Path(__file__).with_name("catalogue.yaml")


# ---------------------------------------------------------------- the file's shape


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceEntry(_Entry):
    url: str = Field(pattern=r"^https://")
    read_on: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    note: str = ""


class QuotaEntry(_Entry):
    global_metric: str = Field(pattern=r"^[A-Z0-9_]+$")
    family_metric: str = Field(pattern=r"^[A-Z0-9_]+$")
    spot_prefix: str = Field(pattern=r"^[A-Z0-9_]+_$")
    sources: dict[str, str]


class BillingEntry(_Entry):
    service: str = Field(min_length=1)
    source: str


class ImageFamily(_Entry):
    path: str = Field(pattern=r"^projects/")
    source: str


class ImagesEntry(_Entry):
    projects: dict[str, str]  # publisher -> path prefix
    families: dict[str, ImageFamily]


class RefusedImage(_Entry):
    project: str  # a key of images.projects
    why: str = Field(min_length=1)


class LimitEntry(_Entry):
    pattern: str = Field(min_length=1)
    disk_types: list[str]
    refused_disks: list[str]
    spot_only: bool
    source: str


class FlexStartEntry(_Entry):
    offered: bool  # the flex-start provisioning model creates this series' machine types
    discount: float = Field(ge=0, lt=1)  # off the on-demand rate, where the catalog's flex-start SKUs are unknown
    source: str


class SeriesSources(_Entry):
    images: str
    min_driver: str
    sku_names: str
    gpus_per_machine: str | None = None  # needed only where the series fixes GPU counts
    nic_type: str | None = None  # needed only where the series requires a vNIC type


class SeriesEntry(_Entry):
    gpus: str = Field(min_length=1)
    min_driver: str = Field(pattern=r"^\d+\.\d+(\.\d+)?$")
    boot_image: str
    refused_images: list[RefusedImage]
    gpus_per_machine: dict[str, int]
    sku_names: dict[str, str | None] = Field(min_length=1)  # `<series>: null` leaves it unpriced
    machine_limits: list[LimitEntry]
    nic_type: Literal["GVNIC"] | None = None  # the vNIC the series requires (None: the default VirtIO-Net)
    flex_start: FlexStartEntry
    sources: SeriesSources


class GpuSources(_Entry):
    machines: str
    quota: str
    compute_capability: str
    sku: str


class GpuEntry(_Entry):
    # No defaults: a GPU type missing any of these is an error, never a silent blank.
    machine_families: list[str] = Field(min_length=1)
    counts: list[int] = Field(min_length=1)
    compute_capability: float = Field(gt=0)
    quota_metric: str = Field(pattern=r"^[A-Z0-9_]+$")
    gpu_family: str | None
    sku: str = Field(min_length=1)
    sources: GpuSources


class CatalogueFile(_Entry):
    sources: dict[str, SourceEntry]
    quota: QuotaEntry
    billing: BillingEntry
    images: ImagesEntry
    series: dict[str, SeriesEntry] = Field(min_length=1)
    gpus: dict[str, GpuEntry] = Field(min_length=1)


# ---------------------------------------------------------------- what the rest of the code reads


@dataclass(frozen=True)
class GpuType:
    """One accelerator type as Compute Engine names it."""

    name: str
    metric: str  # regional quota metric of on-demand GPUs
    spot_metric: str  # the same for Spot GPUs
    families: tuple[str, ...]  # machine-type prefixes that can attach it
    counts: tuple[int, ...]  # valid per-VM counts where the machine type does not fix it
    compute_capability: float  # NVIDIA's; the trainer image's CUDA needs gpus.IMAGE_MIN_CAPABILITY
    gpu_family: str  # its `gpu_family` in the family quota, "" where that quota does not count it
    sku: str  # the words its Billing Catalog SKUs start with


@dataclass(frozen=True)
class MachineSeries:
    """Boot images, driver needs and billing words of one machine series."""

    series: str  # machine-type prefix without the dash: g2, a2, a3, n1
    gpus: str
    min_driver: str
    default_image: str
    refused: tuple[tuple[str, str], ...]  # (image prefix, why) known not to work
    source: str  # the page behind the boot images, cited when one is refused
    read_on: str
    sku_names: tuple[tuple[str, str | None], ...]  # (machine-type prefix, SKU words or None: unpriced)
    nic_type: str | None = None  # the network interface's nic_type the series requires (None: any)
    flex_start: bool = False  # the flex-start provisioning model offers it
    flex_start_discount: float = 0.0  # the published discount off on-demand that prices flex-start here
    flex_start_source: str = ""  # the page behind both, and the day it was read

    def billed_as(self, machine_type: str) -> str | None:
        """The prefix whose core and RAM SKUs price `machine_type` (a3-highgpu-1g -> a3-highgpu), None
        where no wording is known."""
        for prefix, words in sorted(self.sku_names, key=lambda p: len(p[0]), reverse=True):
            if machine_type.startswith(prefix + "-"):
                return prefix if words else None
        return None


@dataclass(frozen=True)
class MachineLimit:
    """A setting some machine types refuse at creation time."""

    pattern: str  # regular expression over the machine type
    disk_types: tuple[str, ...]  # boot disk types it accepts (empty: any)
    refused_disks: tuple[str, ...]  # boot disk types it refuses
    spot_only: bool  # on-demand VMs are not offered (Spot or Flex-start only)
    source: str
    read_on: str


@dataclass(frozen=True)
class Catalogue:
    sources: dict[str, SourceEntry]
    gpu_types: dict[str, GpuType]
    series: dict[str, MachineSeries]
    gpus_per_machine: dict[str, int]  # machine types that fix their GPU count
    machine_limits: tuple[MachineLimit, ...]
    images: dict[str, str]  # family id -> image path
    image_projects: dict[str, str]  # publisher id -> path prefix
    global_metric: str
    family_metric: str
    spot_prefix: str
    billing_service: str


# ---------------------------------------------------------------- loading


class CatalogueError(ConfigError):
    """catalogue.yaml is malformed; the message names each entry and field at fault."""


def _references(doc: CatalogueFile) -> list[str]:
    """What pydantic cannot see: each name one part uses for another must exist."""
    problems: list[str] = []
    cited: set[str] = set()

    def cite(where: str, source_id: str | None) -> None:
        cited.add(source_id)
        if source_id is not None and source_id not in doc.sources:
            problems.append(f"{where}: source {source_id!r} is not listed under `sources`")

    for key, source_id in doc.quota.sources.items():
        cite(f"quota.sources.{key}", source_id)
    for needed in ("metrics", "family"):
        if needed not in doc.quota.sources:
            problems.append(f"quota.sources.{needed}: missing (name the page the quota metric ids come from)")
    cite("billing.source", doc.billing.source)
    projects = doc.images.projects
    for name, family in doc.images.families.items():
        cite(f"images.families.{name}.source", family.source)
        if not family.path.startswith(tuple(projects.values())):
            problems.append(f"images.families.{name}.path: {family.path!r} is under none of images.projects")

    for name, s in doc.series.items():
        at = f"series.{name}"
        for field, source_id in s.sources:
            cite(f"{at}.sources.{field}", source_id)
        if s.boot_image not in doc.images.families:
            problems.append(f"{at}.boot_image: {s.boot_image!r} is not an image under images.families")
        for i, refused in enumerate(s.refused_images):
            if refused.project not in projects:
                problems.append(f"{at}.refused_images.{i}.project: {refused.project!r} is not under images.projects")
        if s.nic_type and s.sources.nic_type is None:
            problems.append(f"{at}.sources.nic_type: missing (name the page that requires {s.nic_type})")
        if s.gpus_per_machine and s.sources.gpus_per_machine is None:
            problems.append(f"{at}.sources.gpus_per_machine: missing (name the page the GPU counts come from)")
        for machine, count in s.gpus_per_machine.items():
            if not machine.startswith(name + "-") or count < 1:
                problems.append(f"{at}.gpus_per_machine.{machine}: a {name}-* machine type with 1 or more GPUs")
        for prefix in s.sku_names:
            if prefix != name and not prefix.startswith(name + "-"):
                problems.append(f"{at}.sku_names.{prefix}: not a prefix of {name}-* machine types")
        cite(f"{at}.flex_start.source", s.flex_start.source)
        for i, limit in enumerate(s.machine_limits):
            cite(f"{at}.machine_limits.{i}.source", limit.source)
            try:
                re.compile(limit.pattern)
            except re.error as exc:
                problems.append(f"{at}.machine_limits.{i}.pattern: not a regular expression ({exc})")
            if not limit.pattern.startswith(name + "-"):
                problems.append(f"{at}.machine_limits.{i}.pattern: {limit.pattern!r} must match {name}-* only")

    carried: set[str] = set()
    for name, g in doc.gpus.items():
        at = f"gpus.{name}"
        for field, source_id in g.sources:
            cite(f"{at}.sources.{field}", source_id)
        for family in g.machine_families:
            series = family.split("-", 1)[0]
            carried.add(series)
            if not family.endswith("-") or series not in doc.series:
                problems.append(f"{at}.machine_families: {family!r} is not '<series>-...-' of a series under `series`")
        if g.counts != sorted(set(g.counts)) or g.counts[0] < 1:
            problems.append(f"{at}.counts: {g.counts} must be distinct counts of 1 or more, ascending")
    for name in doc.series:
        if name not in carried:
            problems.append(f"series.{name}: no GPU under `gpus` attaches to it")
    for source_id in doc.sources:
        if source_id not in cited:
            problems.append(f"sources.{source_id}: cited by nothing")
    return problems


def build(document: object, where: str = "stacks/targets/gcp/catalogue.yaml") -> Catalogue:
    """The checked catalogue of a parsed catalogue.yaml, or CatalogueError naming every fault."""
    try:
        doc = CatalogueFile.model_validate(document)
        faults = _references(doc)
    except ValidationError as exc:
        doc, faults = None, [f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors()]
    if faults:
        raise CatalogueError(
            f"invalid GPU catalogue {where}:\n  " + "\n  ".join(faults),
            hint="fix the entry (see the comments in catalogue.yaml)",
        )

    sources = dict(doc.sources)
    projects = dict(doc.images.projects)
    images = {k: f.path for k, f in doc.images.families.items()}
    series = {}
    for name, s in doc.series.items():
        cited = sources[s.sources.images]
        series[name] = MachineSeries(
            series=name,
            gpus=s.gpus,
            min_driver=s.min_driver,
            default_image=images[s.boot_image],
            refused=tuple((projects[r.project], r.why) for r in s.refused_images),
            source=cited.url,
            read_on=cited.read_on,
            sku_names=tuple(s.sku_names.items()),
            nic_type=s.nic_type,
            flex_start=s.flex_start.offered,
            flex_start_discount=s.flex_start.discount,
            flex_start_source=f"{sources[s.flex_start.source].url}, read {sources[s.flex_start.source].read_on}",
        )
    prefix = doc.quota.spot_prefix
    gpu_types = {
        name: GpuType(
            name=name,
            metric=g.quota_metric,
            spot_metric=prefix + g.quota_metric,
            families=tuple(g.machine_families),
            counts=tuple(g.counts),
            compute_capability=g.compute_capability,
            gpu_family=g.gpu_family or "",
            sku=g.sku,
        )
        for name, g in doc.gpus.items()
    }
    limits = tuple(
        MachineLimit(
            pattern=m.pattern,
            disk_types=tuple(m.disk_types),
            refused_disks=tuple(m.refused_disks),
            spot_only=m.spot_only,
            source=sources[m.source].url,
            read_on=sources[m.source].read_on,
        )
        for s in doc.series.values()
        for m in s.machine_limits
    )
    return Catalogue(
        sources=sources,
        gpu_types=gpu_types,
        series=series,
        gpus_per_machine={m: n for s in doc.series.values() for m, n in s.gpus_per_machine.items()},
        machine_limits=limits,
        images=images,
        image_projects=projects,
        global_metric=doc.quota.global_metric,
        family_metric=doc.quota.family_metric,
        spot_prefix=prefix,
        billing_service=doc.billing.service,
    )


@functools.cache
def load(path: Path = CATALOGUE_FILE) -> Catalogue:
    try:
        document = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise CatalogueError(f"invalid GPU catalogue {path}: not YAML ({exc})") from None
    return build(document, "stacks/targets/gcp/catalogue.yaml" if path == CATALOGUE_FILE else str(path))
