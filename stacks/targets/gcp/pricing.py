"""Compute Engine list prices from the Cloud Billing Catalog API, cached in the env bucket for a day.

A VM's price is built the way Google bills it: vCPUs x the series' core rate + GiB x its RAM
rate + GPUs x the GPU rate (G2/A2/A3 bill their bundled GPUs as GPU SKUs too). Rates come
from the public SKU list of Compute Engine (`services/6F81-5844-456A/skus`, On-demand SKUs
have usageType OnDemand, Spot ones Preemptible), matched by the region in `serviceRegions`
and an anchored description ("G2 Instance Core running in …", "Nvidia L4 GPU attached to Spot
Preemptible VMs running in …"; the words are catalogue.yaml's), never by the location words. A key
that more than one SKU matches is left unpriced rather than guessed. vCPUs and memory come from Compute's
machineTypes.get. When the API cannot be read, the dated fallback table
(stacks/targets/gcp/prices.yaml) prices the run, with a warning.

TRAINSTACK_CLOUDBILLING_ENDPOINT points the catalog reader at recorded responses (tests).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Iterable

from stacks.errors import InfraError
from stacks.targets.gcp import api
from stacks.targets.gcp.gpus import CATALOGUE, series_of
from stacks.targets.gcp.prices import PriceBook, fallback_book

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig
    from trainer.storage import Bucket

CATALOG_API = "https://cloudbilling.googleapis.com"
ENDPOINT_ENV = "TRAINSTACK_CLOUDBILLING_ENDPOINT"
COMPUTE_SERVICE = CATALOGUE.billing_service  # Compute Engine's service id in the catalog
CACHE_KEY = "_pricing/compute-engine.json"
CACHE_TTL_S = 24 * 3600
PAGE_SIZE = 5000
MAX_PAGES = 50  # ~7k SKUs today: a runaway page token must not loop forever
USAGE = {False: "OnDemand", True: "Preemptible"}
UNIT = {"core": "h", "ram": "GiBy.h", "gpu": "h"}


def _patterns() -> list[tuple[str, re.Pattern]]:
    """One anchored pattern per key, from the catalogue's wording: a series' core and RAM SKUs under the
    machine-type prefix that bills by them (a prefix without wording stays unpriced), each GPU's SKUs."""
    out = []
    for row in CATALOGUE.series.values():
        for prefix, words in row.sku_names:
            if not words:
                continue
            for kind, word in (("core", "Core"), ("ram", "Ram")):
                out.append(
                    (
                        f"{kind}/{prefix}",
                        re.compile(rf"(?:Spot Preemptible |Preemptible )?{re.escape(words)} {word} running in \S.*"),
                    )
                )
    for gpu in CATALOGUE.gpu_types.values():
        out.append(
            (
                f"gpu/{gpu.name}",
                re.compile(
                    rf"{re.escape(gpu.sku)} GPU (?:running in|attached to Spot Preemptible VMs running in) \S.*"
                ),
            )
        )
    return out


PATTERNS = _patterns()


def sku_key(sku: dict) -> str | None:
    """ "core/g2", "ram/n1", "gpu/nvidia-l4"... for a SKU we price with, else None."""
    category = sku.get("category") or {}
    if category.get("resourceFamily") != "Compute" or category.get("usageType") not in USAGE.values():
        return None
    description = sku.get("description", "")
    for key, pattern in PATTERNS:
        if pattern.fullmatch(description):
            return key
    return None


def unit_price(sku: dict, key: str) -> float | None:
    """USD per hour (per vCPU, GiB or GPU) of the SKU's current price; None for another shape."""
    try:
        expression = sku["pricingInfo"][-1]["pricingExpression"]
        (rate,) = expression["tieredRates"]
        money = rate["unitPrice"]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    if expression.get("usageUnit") != UNIT[key.split("/")[0]] or money.get("currencyCode", "USD") != "USD":
        return None
    return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9


def rates_from_skus(skus: Iterable[dict]) -> dict:
    """{region: {usageType: {key: {"usd": price, "sku": id} or {"ambiguous": [ids]}}}}."""
    found: dict = {}
    for sku in skus:
        key = sku_key(sku)
        price = unit_price(sku, key) if key else None
        if price is None:
            continue
        usage = sku["category"]["usageType"]
        for region in sku.get("serviceRegions") or ():
            found.setdefault(region, {}).setdefault(usage, {}).setdefault(key, []).append((price, sku.get("skuId")))
    return {
        region: {
            usage: {
                key: (
                    {"usd": round(c[0][0], 9), "sku": c[0][1]}
                    if len(c) == 1
                    else {"ambiguous": sorted(str(sku_id) for _, sku_id in c)}
                )
                for key, c in keys.items()
            }
            for usage, keys in usages.items()
        }
        for region, usages in found.items()
    }


def fetch_skus(session, base: str | None) -> list[dict]:
    """Every Compute Engine SKU, following nextPageToken (absent or "" on the last page)."""
    url = f"{base or CATALOG_API}/v1/services/{COMPUTE_SERVICE}/skus"
    skus, token = [], ""
    for _ in range(MAX_PAGES):
        params = {"pageSize": PAGE_SIZE, "currencyCode": "USD", **({"pageToken": token} if token else {})}
        resp = api.call(session, "GET", url, "cannot read the Cloud Billing Catalog", params=params)
        if resp.status_code != 200:
            hint = (
                "enable the Cloud Billing API in the project of your credentials: gcloud services enable "
                "cloudbilling.googleapis.com"
                if resp.status_code == 403
                else "retry later"
            )
            raise InfraError(
                f"Cloud Billing Catalog answered HTTP {resp.status_code}: {api.api_message(resp)}", hint=hint
            )
        try:
            page = resp.json()
        except ValueError:
            page = None
        if not isinstance(page, dict):
            raise InfraError(
                f"the Cloud Billing Catalog answered something that is not a SKU page: {resp.text[:120]!r}",
                hint="retry later (a proxy in the way?)",
            )
        skus += page.get("skus") or []
        token = page.get("nextPageToken") or ""
        if not token:
            return skus
    raise InfraError(
        f"the Cloud Billing Catalog kept paging after {MAX_PAGES} pages",
        hint="retry later; costs use the fallback table meanwhile",
    )


@dataclass
class CatalogBook(PriceBook):
    """Prices from the catalog's unit rates and the machine shapes Compute reports."""

    read_at: str
    rates: dict
    shapes: dict = field(default_factory=dict)  # machine type -> {"vcpus": n, "memory_gib": x}

    @property
    def source(self) -> str:
        return f"Cloud Billing Catalog API, read {self.read_at}"

    def _rate(self, region: str, spot: bool, key: str) -> tuple[float | None, str]:
        entry = self.rates.get(region, {}).get(USAGE[spot], {}).get(key)
        kind = "Spot" if spot else "on-demand"
        if entry is None:
            return None, f"cost unknown: the Billing Catalog has no {kind} {key} SKU in {region}"
        if "ambiguous" in entry:
            return None, (
                f"cost unknown: {len(entry['ambiguous'])} {kind} {key} SKUs match in {region} "
                f"({', '.join(entry['ambiguous'][:3])})"
            )
        return float(entry["usd"]), ""

    def vm_per_hour(
        self, region: str | None, machine_type: str, gpu_type: str | None, gpu_count: int, spot: bool
    ) -> tuple[float | None, str]:
        row, shape = series_of(machine_type), self.shapes.get(machine_type)
        series = row.billed_as(machine_type) if row else None
        if series is None:
            return None, f"cost unknown: no catalog wording known for machine type {machine_type}"
        if shape is None:
            return None, f"cost unknown: the shape of {machine_type} could not be read from Compute Engine"
        parts = [(shape["vcpus"], f"core/{series}"), (shape["memory_gib"], f"ram/{series}")]
        if gpu_type and gpu_count:
            parts.append((gpu_count, f"gpu/{gpu_type}"))
        total = 0.0
        for amount, key in parts:
            rate, note = self._rate(region or "", spot, key)
            if rate is None:
                return None, note
            total += amount * rate
        return round(total, 4), ""

    def document(self) -> dict:
        return {"read_at": self.read_at, "service": COMPUTE_SERVICE, "rates": self.rates, "shapes": self.shapes}


def _age_s(read_at: str) -> float:
    try:
        then = datetime.fromisoformat(read_at.replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (datetime.now(timezone.utc) - then).total_seconds()


def _cached(bucket: "Bucket | None") -> CatalogBook | None:
    if bucket is None:
        return None
    try:
        doc = json.loads(bucket.read_bytes(CACHE_KEY))
        book = CatalogBook(read_at=doc["read_at"], rates=doc["rates"], shapes=doc.get("shapes") or {})
    except Exception:  # absent, unreadable or from another version: read the API again
        return None
    return book if _age_s(book.read_at) < CACHE_TTL_S else None


def _save(bucket: "Bucket | None", book: CatalogBook) -> None:
    if bucket is None:
        return
    try:
        bucket.write_bytes(CACHE_KEY, json.dumps(book.document(), indent=1).encode())
    except Exception:  # a cache that cannot be written only costs the next run one more read
        pass


def catalog_book(
    config: "EnvConfig",
    bucket: "Bucket | None",
    machine_types: Iterable[str],
    *,
    compute=None,
    book: CatalogBook | None = None,
) -> CatalogBook:
    """The cached (< 1 day) or freshly read catalog rates, with the shapes of `machine_types`
    (a shape Compute cannot give leaves that machine type "cost unknown", not the whole book)."""
    book = book or _cached(bucket)
    if book is None:
        session, base = api.session(ENDPOINT_ENV, quota_project=config.gcp.project)
        book = CatalogBook(
            read_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
            rates=rates_from_skus(fetch_skus(session, base)),
        )
        _save(bucket, book)  # the rates are good whatever the shapes do
    missing = sorted({m for m in machine_types if m and m not in book.shapes})
    if missing:
        from stacks.targets.gcp.quota import ComputeQuotas, candidate_zones

        compute = compute or ComputeQuotas(config.gcp.project)
        for machine_type in missing:
            for zone in candidate_zones(config):
                try:
                    shape = compute.machine_shape(zone, machine_type)
                except InfraError:
                    break  # no Compute access: this machine type stays unpriced
                if shape is not None:
                    book.shapes[machine_type] = shape
                    break
        if any(m in book.shapes for m in missing):
            _save(bucket, book)
    return book


_BOOKS: dict = {}  # one book per command: (project, bucket, catalog endpoint) -> the book it got


def price_book(
    config: "EnvConfig", bucket: "Bucket | None", machine_types: Iterable[str], *, compute=None
) -> PriceBook:
    """The catalog's prices, or the fallback table with a warning saying why; asked again in the
    same process (the estimate, then the run's metadata; `trainctl runs`), the same book answers."""
    import os

    key = (config.gcp.project, bucket.uri if bucket is not None else None, os.environ.get(ENDPOINT_ENV))
    known = _BOOKS.get(key)
    if known is not None and not isinstance(known, CatalogBook):
        return known  # the catalog could not be read a moment ago: do not wait on it again
    try:
        _BOOKS[key] = catalog_book(config, bucket, machine_types, compute=compute, book=known)
    except InfraError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        _BOOKS[key] = fallback_book(warning=f"the Cloud Billing Catalog could not be read: {exc.message}{hint}")
    return _BOOKS[key]
