"""The price table (stacks/config/prices.yaml) and cost estimates of a run's VMs.

Estimates only: approximate list prices, no discounts, disks or network. A machine type,
GPU or region missing from the table gives an estimate of None with a reason, never an error.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from stacks.config.models import LanguageSettings, StrictModel
from stacks.errors import ConfigError

PRICES_FILE = Path(__file__).with_name("prices.yaml")


class Price(StrictModel):
    on_demand: float = Field(ge=0)
    spot: float = Field(ge=0)

    def per_hour(self, spot: bool) -> float:
        return self.spot if spot else self.on_demand


class RegionPrices(StrictModel):
    machine_types: dict[str, Price] = {}
    gpus: dict[str, Price] = {}


class PriceTable(StrictModel):
    taken: str = Field(description="date the prices were read from the sources (YYYY-MM-DD)")
    currency: str = "USD"
    sources: list[str]
    regions: dict[str, RegionPrices]

    def vm_per_hour(self, region: str | None, machine_type: str, gpu_type: str | None, gpu_count: int,
                    spot: bool) -> tuple[float | None, str]:
        """(price of one VM per hour, "" ) or (None, why the cost is unknown)."""
        prices = self.regions.get(region or "")
        if prices is None:
            return None, f"cost unknown: no prices for region {region!r} in {PRICES_FILE.name}"
        machine = prices.machine_types.get(machine_type)
        if machine is None:
            return None, f"cost unknown: no price for machine type {machine_type} in {region}"
        total = machine.per_hour(spot)
        if gpu_type and gpu_count:
            gpu = prices.gpus.get(gpu_type)
            if gpu is None:
                return None, f"cost unknown: no price for GPU {gpu_type} in {region}"
            total += gpu_count * gpu.per_hour(spot)
        return round(total, 4), ""


@functools.cache
def price_table(path: Path = PRICES_FILE) -> PriceTable:
    try:
        return PriceTable.model_validate(yaml.safe_load(path.read_text()))
    except ValidationError as exc:
        raise ConfigError(f"invalid price table {path}: {exc}", hint="fix the file (see its header)") from None


@dataclass(frozen=True)
class CostEstimate:
    """What a run's VMs cost per hour (all nodes) and at its max_run_hours; None when unknown."""

    region: str | None
    spot: bool
    vm_per_hour: float | None  # one VM
    nodes: int
    max_run_hours: float
    note: str = ""
    taken: str = ""

    @property
    def per_hour(self) -> float | None:
        return None if self.vm_per_hour is None else round(self.vm_per_hour * self.nodes, 4)

    @property
    def at_max_run_hours(self) -> float | None:
        return None if self.per_hour is None else round(self.per_hour * self.max_run_hours, 2)

    def line(self, machine: str) -> str:
        kind = "Spot" if self.spot else "on-demand"
        what = f"{self.nodes} x {machine} ({kind}, {self.region})"
        if self.per_hour is None:
            return f"estimated cost of {what}: {self.note}"
        return (f"estimated cost of {what}: ${self.per_hour:.2f}/hour, at most ${self.at_max_run_hours:.2f} "
                f"at max_run_hours={self.max_run_hours:g} (approximate list prices of {self.taken}; "
                f"stacks/config/{PRICES_FILE.name})")

    def as_dict(self) -> dict:
        return {"region": self.region, "spot": self.spot, "nodes": self.nodes, "vm_per_hour": self.vm_per_hour,
                "per_hour": self.per_hour, "max_run_hours": self.max_run_hours,
                "at_max_run_hours": self.at_max_run_hours, "prices_taken": self.taken, "note": self.note}


def estimate(settings: LanguageSettings, region: str | None) -> CostEstimate:
    table = price_table()
    vm, note = table.vm_per_hour(region, settings.machine_type, settings.gpu.type, settings.gpu.count, settings.spot)
    return CostEstimate(region, settings.spot, vm, settings.nodes, settings.max_run_hours, note, table.taken)
