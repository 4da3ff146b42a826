"""Recorded Compute Engine answers for project p1 (projects.get, regions.get, acceleratorTypes.get)."""

from __future__ import annotations

import copy
import json

from tests.support.recorded_api import FIXTURES, RecordedApi

PROJECT = "/compute/v1/projects/p1"
REGION = PROJECT + "/regions/{}"
ACCEL = PROJECT + "/zones/{}/acceleratorTypes/nvidia-l4"
ACCEL_ANY = PROJECT + "/zones/[^/]+/acceleratorTypes/[^/]+"
MACHINE = PROJECT + "/zones/{}/machineTypes/{}"
DEV = ["gcp.project=p1", "gcp.fallback_zones=[europe-west1-b, europe-west1-c]"]


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / "compute" / name).read_text())


def with_quotas(doc: dict, **metrics: tuple[float, float] | None) -> dict:
    """A copy of a Region/Project resource with metrics set to (limit, usage) or removed (None)."""
    doc = copy.deepcopy(doc)
    quotas = [q for q in doc["quotas"] if q["metric"] not in metrics]
    quotas += [{"metric": m, "limit": v[0], "usage": v[1]} for m, v in metrics.items() if v is not None]
    doc["quotas"] = quotas
    return doc


def accelerator(zone: str) -> dict:
    doc = fixture("accelerator_type_nvidia-l4.json")
    return json.loads(json.dumps(doc).replace("europe-west4-a", zone))


def machine_type(zone: str, name: str) -> dict:
    doc = fixture(f"machine_type_{name}.json")
    return json.loads(json.dumps(doc).replace("europe-west4-a", zone))


def compute_api(*, project=None, ew4=None, ew1=None, not_offered=()) -> RecordedApi:
    """Routes for p1: projects.get, regions.get of two regions, acceleratorTypes.get per zone."""
    routes = {
        ("GET", PROJECT): (200, project or fixture("project_p1.json")),
        ("GET", REGION.format("europe-west4")): (200, ew4 or fixture("region_europe-west4.json")),
        ("GET", REGION.format("europe-west1")): (200, ew1 or fixture("region_europe-west1.json")),
    }
    for zone in not_offered:
        routes[("GET", ACCEL.format(zone))] = (404, "compute/error_404_accelerator_type.json")
    for zone in ("europe-west4-a", "europe-west4-b", "europe-west4-c", "europe-west1-b", "europe-west1-c"):
        routes.setdefault(("GET", ACCEL.format(zone)), (200, accelerator(zone)))
        for machine in ("g2-standard-8", "a2-highgpu-1g"):
            routes.setdefault(("GET", MACHINE.format(zone, machine)), (200, machine_type(zone, machine)))
    return RecordedApi(routes)
