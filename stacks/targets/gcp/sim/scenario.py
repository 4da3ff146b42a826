"""The simulated cloud's state at time 0, read from a scenario file: what each zone offers, the project's
quotas and what outside VMs already use, Spot capacity windows and preemptions, prices.

Capacity windows and preemptions are the local target's market (trainer/launchers/market.py) with the
same schema as `spot_market` in envs/local-spot.yaml: one market model, two targets.

Where each rule the sim enforces comes from (pages read 2026-11-28):
- Which zones offer which GPU and machine type, and a zone without it: acceleratorTypes.get / machineTypes.get
  answer 404 "The resource '...' was not found" (https://cloud.google.com/compute/docs/gpus/gpu-regions-zones;
  the message as recorded in tests/fixtures/compute/error_404_accelerator_type.json).
- Regional quotas (regions.get `quotas[]`: metric, limit, usage) and the global GPUS_ALL_REGIONS / CPUS_ALL_REGIONS
  (projects.get): https://cloud.google.com/compute/resource-usage and
  https://cloud.google.com/compute/docs/reference/rest/v1/regions.
- GPU family quotas of H100/H200 (Cloud Quotas quotaInfos, dimensions region and gpu_family):
  https://cloud.google.com/docs/quotas/implement-common-use-cases and
  https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.services.quotaInfos.
- gVNIC required on A3 (catalogue `nic_type`): https://cloud.google.com/compute/docs/instances/create-vm-with-gvnic.
- Spot-only machine types (A3 High with 1, 2 or 4 GPUs: Spot or Flex-start only):
  https://cloud.google.com/compute/docs/accelerator-optimized-machines (stacks/targets/gcp/catalogue.yaml's
  `spot_only`, the default of `spot_only` here).
- Flex-start: a resize request (instanceGroupManagerResizeRequests) waits until the zone's flex-start capacity
  comes (`flex_start_after_s`), then creates all its VMs at once; they are never preempted and are deleted at the
  template's maxRunDuration (https://cloud.google.com/compute/docs/instances/about-flex-start-vms,
  https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagerResizeRequests).
- Prices: the Billing Catalog's SKU list, https://cloud.google.com/billing/v1/how-tos/catalog-api.
- Capacity advice (advice.capacity, Preview; advice.capacityHistory: none for N1 with GPUs):
  https://cloud.google.com/compute/docs/reference/rest/v1/advice (request and answer shapes: google-cloud-compute's
  CapacityAdviceRequest/Response, CapacityHistoryRequest/Response).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from stacks.config.market import SimPreemption, SimZone, SpotMarketSettings
from stacks.config.strict import StrictModel
from stacks.errors import ConfigError

DEFAULT_SCENARIO = Path(__file__).with_name("scenario.yaml")
CAPACITY_CODES = (
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "UNSUPPORTED_OPERATION",
    "STOCKOUT",
    "RESOURCE_POOL_EXHAUSTED",
)


class Quota(StrictModel):
    """A quota's limit, and what VMs outside the simulation already use of it (the sim's own VMs add theirs)."""

    limit: float = Field(ge=-1, description="-1: unlimited")
    usage: float = Field(0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _a_number_is_a_limit(cls, data):
        return {"limit": data} if isinstance(data, (int, float)) else data


class MachineShape(StrictModel):
    """machineTypes.get: vCPUs, memory, and the GPUs the type comes with (G2, A2, A3 bundle theirs)."""

    vcpus: int = Field(ge=1)
    memory_mb: int = Field(ge=1)
    gpus: dict[str, int] = Field({}, description="accelerator type -> count the machine type bundles")


class ZoneOffer(SimZone):
    """One zone: what it offers, its Spot capacity windows (`outages`, market seconds), the error codes Compute
    Engine mixes into its capacity failures (in turn, after ZONE_RESOURCE_POOL_EXHAUSTED)."""

    accelerators: list[str] = Field([], description="acceleratorTypes the zone offers")
    machine_types: list[str] = Field([], description="machineTypes the zone offers")
    capacity_errors: list[str] = Field([], description=f"mixed into dry-zone failures: {', '.join(CAPACITY_CODES)}")
    on_demand_dry: bool = Field(False, description="on-demand VMs also find no capacity while the zone is dry")
    obtainability: float = Field(0.5, ge=0, le=1, description="advice.capacity's score for the zone's Spot VMs")
    estimated_uptime_s: float = Field(36000, ge=0, description="advice.capacity's estimated uptime there")
    preemption_rate: float = Field(0.05, ge=0, le=1, description="advice.capacityHistory's daily rate, every day")
    spot_price: float | None = Field(None, ge=0, description="advice.capacityHistory's Spot price, USD/h (unset: none)")
    flex_start_after_s: float | None = Field(
        0,
        ge=0,
        description="simulated seconds a flex-start resize request waits in this zone before all its VMs come at "
        "once (null: never)",
    )

    @field_validator("capacity_errors")
    @classmethod
    def _known_codes(cls, codes: list[str]) -> list[str]:
        unknown = sorted(set(codes) - set(CAPACITY_CODES))
        if unknown:
            raise ValueError(f"unknown capacity error code(s) {unknown}; known: {', '.join(CAPACITY_CODES)}")
        return codes


class RegionScenario(StrictModel):
    quotas: dict[str, Quota] = Field({}, description="regions.get metrics: CPUS, NVIDIA_L4_GPUS, PREEMPTIBLE_...")
    gpu_families: dict[str, dict[str, Quota]] = Field(
        {},
        description="Cloud Quotas family quotas: GPUS_PER_GPU_FAMILY / PREEMPTIBLE_GPUS_PER_GPU_FAMILY -> gpu_family",
    )


class Price(StrictModel):
    on_demand: float = Field(ge=0)
    spot: float = Field(ge=0)


class RegionPrices(StrictModel):
    """USD per hour: per vCPU and per GiB of a machine-type prefix's core/RAM SKUs (catalogue `sku_names`), per GPU."""

    cores: dict[str, Price] = {}
    ram: dict[str, Price] = {}
    gpus: dict[str, Price] = {}


class Scenario(StrictModel):
    project: str = "p1"
    speedup: float = Field(60, gt=0, description="simulated seconds per wall-clock second")
    retry_s: float = Field(60, gt=0, description="a group retries a failed VM creation this often (simulated)")
    boot_s: float = Field(30, ge=0, description="from creation to RUNNING (simulated)")
    stop_s: float = Field(30, ge=0, description="a preempted or deleted VM's shutdown (Spot: up to 30 s)")
    shutdown_script: bool = Field(
        True,
        description="a preemption runs the VM's shutdown script (false: it never does, as a real preemption was "
        "seen to; instance/preempted still turns TRUE and the VM is killed when its notice ends)",
    )
    operation_s: dict[str, float] = Field(
        {}, description="simulated seconds an operation of a kind (instanceGroupManagers.delete, ...) reads RUNNING"
    )
    global_quotas: dict[str, Quota] = Field({}, description="projects.get: GPUS_ALL_REGIONS, CPUS_ALL_REGIONS")
    regions: dict[str, RegionScenario] = Field(min_length=1)
    zones: dict[str, ZoneOffer] = Field(min_length=1, description="zones, each in a region named by its prefix")
    machine_types: dict[str, MachineShape] = Field(description="the shape of every machine type a zone offers")
    spot_only: list[str] | None = Field(None, description="machine types without on-demand VMs (unset: catalogue)")
    preemptions: list[SimPreemption] = []
    prices: dict[str, RegionPrices] = {}
    advice_refused: int | None = Field(
        None, description="advice.capacity and advice.capacityHistory answer this status (403: Preview not enabled)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        problems = []
        for zone, offer in self.zones.items():
            if region_of(zone) not in self.regions:
                problems.append(f"zone {zone}: no region {region_of(zone)} under `regions`")
            problems += [
                f"zone {zone}: machine type {m} has no shape under `machine_types`"
                for m in offer.machine_types
                if m not in self.machine_types
            ]
        problems += [f"preemption in {p.zone}: no such zone" for p in self.preemptions if p.zone not in self.zones]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def market(self) -> SpotMarketSettings:
        """The zones' capacity windows and the preemptions as the local target's market reads them."""
        return SpotMarketSettings(
            speedup=self.speedup,
            zones={z: SimZone(outages=o.outages) for z, o in self.zones.items()},
            preemptions=self.preemptions,
        )

    def is_spot_only(self, machine_type: str) -> bool:
        if self.spot_only is not None:
            return machine_type in self.spot_only
        from stacks.targets.gcp.gpus import CATALOGUE

        return any(limit.spot_only and re.fullmatch(limit.pattern, machine_type) for limit in CATALOGUE.machine_limits)

    def required_nic_type(self, machine_type: str) -> str | None:
        """The vNIC the machine series requires (A3: GVNIC), as the catalogue says."""
        from stacks.targets.gcp.gpus import required_nic_type

        return required_nic_type(machine_type)


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def load_scenario(path: Path | str = DEFAULT_SCENARIO, overrides: dict | None = None) -> Scenario:
    """A scenario file (with `overrides` merged over it, mappings deep), checked; ConfigError names what is wrong."""
    import yaml
    from pydantic import ValidationError

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the simulated cloud's scenario {path}: {exc}") from exc
    try:
        return Scenario.model_validate(deep_merge(doc, overrides or {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"scenario {path}: {where}: {first['msg']}", hint=f"fix {path} (schema: {__name__}.Scenario)"
        ) from exc


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
