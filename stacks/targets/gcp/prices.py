"""Price books (what a VM costs per hour) and the cost estimates of a run's VMs.

Two books answer the same question: the Cloud Billing Catalog (stacks/targets/gcp/pricing.py, the
source on gcp) and the dated fallback table in stacks/targets/gcp/prices.yaml, used only when the
catalog cannot be read (with a warning) or where nothing may call an API (`plan --from-json`).
Estimates only: list prices, no discounts, disks or network. What a book cannot price gives
an estimate of None with a reason, never an error. Each capacity rung at its own rate (`rung_per_hour`): Spot and
on-demand as the book has them; flex-start as the on-demand rate less the discount Google publishes for the series
(catalogue.yaml `flex_start`), as neither book reads flex-start SKUs (their wording is unverified:
docs/research/gcp-billing-catalog.md) and the published "up to 53%" makes the estimate a floor.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, model_validator

from stacks.config.models import LanguageSettings, StrictModel
from stacks.errors import ConfigError
from stacks.targets.gcp.gpus import capacity_rung, fixed_gpu_count, series_of

PRICES_FILE = Path(__file__).with_name("prices.yaml")


class PriceBook:
    """What one VM costs per hour, and where the figure comes from."""

    warning: str = ""  # set when this book stands in for a better source

    @property
    def source(self) -> str:
        raise NotImplementedError

    def vm_per_hour(
        self, region: str | None, machine_type: str, gpu_type: str | None, gpu_count: int, spot: bool
    ) -> tuple[float | None, str]:
        """(price of one VM per hour, "") or (None, why the cost is unknown)."""
        raise NotImplementedError


class VmPrice(StrictModel):
    on_demand: float = Field(ge=0)
    spot: float = Field(ge=0)
    source: str = Field(description="a key of `sources`")

    def per_hour(self, spot: bool) -> float:
        return self.spot if spot else self.on_demand


class PriceTable(StrictModel):
    taken: str = Field(description="date of the newest source (YYYY-MM-DD)")
    currency: str = "USD"
    sources: dict[str, str]
    regions: dict[str, dict[str, VmPrice]] = Field(description="region -> machine type -> whole-VM price")

    @model_validator(mode="after")
    def _sources_named(self) -> "PriceTable":
        unknown = {p.source for r in self.regions.values() for p in r.values()} - set(self.sources)
        if unknown:
            raise ValueError(f"figures cite sources not listed under `sources`: {sorted(unknown)}")
        # A figure for a machine series the GPU catalogue (catalogue.yaml) does not hold could price
        # nothing a config can ask for: config validation refuses that machine type first.
        strangers = sorted({m for r in self.regions.values() for m in r if series_of(m) is None})
        if strangers:
            raise ValueError(f"machine types of no series in catalogue.yaml: {strangers}")
        return self


@dataclass
class TableBook(PriceBook):
    """The fallback table: whole-VM prices (machine with the GPUs it comes with), dated and sourced."""

    table: PriceTable
    warning: str = ""

    @property
    def source(self) -> str:
        return f"fallback table of {self.table.taken} (stacks/targets/gcp/{PRICES_FILE.name})"

    def vm_per_hour(self, region, machine_type, gpu_type, gpu_count, spot):
        prices = self.table.regions.get(region or "")
        if prices is None:
            return None, f"cost unknown: no prices for region {region!r} in {PRICES_FILE.name}"
        vm = prices.get(machine_type)
        if vm is None:
            return None, f"cost unknown: no price for machine type {machine_type} in {region} in {PRICES_FILE.name}"
        if gpu_type and gpu_count and gpu_count != fixed_gpu_count(machine_type):
            return None, (
                f"cost unknown: {PRICES_FILE.name} prices {machine_type} only with the GPUs it comes "
                f"with, not {gpu_count} x {gpu_type} attached"
            )
        return round(vm.per_hour(spot), 4), ""


def rung_per_hour(
    book: PriceBook, region: str | None, machine_type: str, gpu_type: str | None, gpu_count: int, rung: str
) -> tuple[float | None, str]:
    """(price of one VM per hour at capacity rung `rung`, how the flex-start rate was made or "") or (None, why)."""
    if rung != "flex_start":
        return book.vm_per_hour(region, machine_type, gpu_type, gpu_count, rung == "spot")
    row = series_of(machine_type)
    if row is None or not row.flex_start:
        return None, f"cost unknown: flex-start does not offer {machine_type}"
    on_demand, note = book.vm_per_hour(region, machine_type, gpu_type, gpu_count, False)
    if on_demand is None:
        return None, note
    return round(on_demand * (1 - row.flex_start_discount), 4), (
        f"flex-start at the on-demand rate less the published {row.flex_start_discount:.0%} discount "
        f"({row.flex_start_source}): no flex-start SKU is read"
    )


@functools.cache
def price_table(path: Path = PRICES_FILE) -> PriceTable:
    try:
        return PriceTable.model_validate(yaml.safe_load(path.read_text()))
    except ValidationError as exc:
        raise ConfigError(f"invalid price table {path}: {exc}", hint="fix the file (see its header)") from None


def fallback_book(warning: str = "") -> TableBook:
    return TableBook(price_table(), warning=warning)


@dataclass(frozen=True)
class CostEstimate:
    """What a run's VMs cost per hour (all nodes) and at its max_run_hours; None when unknown."""

    region: str | None
    spot: bool
    vm_per_hour: float | None  # one VM
    nodes: int
    max_run_hours: float
    note: str = ""  # why the cost is unknown, or how a flex-start rate was made
    source: str = ""
    rung: str = ""  # spot, flex_start or on_demand ("": from `spot`)

    @property
    def kind(self) -> str:
        rung = self.rung or ("spot" if self.spot else "on_demand")
        return {"spot": "Spot", "flex_start": "flex-start", "on_demand": "on-demand"}[rung]

    @property
    def per_hour(self) -> float | None:
        return None if self.vm_per_hour is None else round(self.vm_per_hour * self.nodes, 4)

    @property
    def at_max_run_hours(self) -> float | None:
        return None if self.per_hour is None else round(self.per_hour * self.max_run_hours, 2)

    def line(self, machine: str) -> str:
        what = f"{self.nodes} x {machine} ({self.kind}, {self.region})"
        if self.per_hour is None:
            return f"estimated cost of {what}: {self.note}"
        how = f"; {self.note}" if self.note else ""
        return (
            f"estimated cost of {what}: ${self.per_hour:.2f}/hour, at most ${self.at_max_run_hours:.2f} "
            f"at max_run_hours={self.max_run_hours:g} (list prices: {self.source}{how})"
        )

    def as_dict(self) -> dict:
        return {
            "region": self.region,
            "spot": self.spot,
            "rung": self.rung or ("spot" if self.spot else "on_demand"),
            "nodes": self.nodes,
            "vm_per_hour": self.vm_per_hour,
            "per_hour": self.per_hour,
            "max_run_hours": self.max_run_hours,
            "at_max_run_hours": self.at_max_run_hours,
            "prices_source": self.source,
            "note": self.note,
        }


def estimate(settings: LanguageSettings, region: str | None, book: PriceBook) -> CostEstimate:
    """The run's VMs at the rung it asks for now (settings.rung)."""
    rung = capacity_rung(settings)
    vm, note = rung_per_hour(
        book, region, settings.gcp.machine_type, settings.gcp.gpu.type, settings.gcp.gpu.count, rung
    )
    return CostEstimate(region, settings.spot, vm, settings.nodes, settings.max_run_hours, note, book.source, rung)
