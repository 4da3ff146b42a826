"""The simulated cloud's capacity advice, in the shape of Compute Engine's advice.capacity (Preview) and
advice.capacityHistory (https://cloud.google.com/compute/docs/reference/rest/v1/advice; the request and answer
messages of google-cloud-compute's CapacityAdviceRequest/Response and CapacityHistoryRequest/Response): each zone's
figures are the scenario's (`obtainability`, `estimated_uptime_s`, `preemption_rate`, `spot_price`), and
`advice_refused` makes both answer that status, as a project without the Preview gets."""

from __future__ import annotations

import time

from stacks.targets.gcp.sim.answers import API
from stacks.targets.gcp.sim.cloud import SimCloud, SimError, stamp
from stacks.targets.gcp.sim.scenario import region_of


def _advice_allowed(cloud: SimCloud, method: str) -> None:
    refused = cloud.scenario.advice_refused
    if refused is not None:
        p = cloud.scenario.project
        raise SimError(
            refused,
            f"Required 'compute.advice.{method}' permission for 'projects/{p}': the method is in Preview and not "
            "enabled for this project",
            reason="forbidden" if refused == 403 else "notFound",
        )


def capacity_advice(cloud: SimCloud, region: str, body: dict) -> dict:
    """advice.capacity: one recommendation per asked zone of `region` that offers the machine type, its Spot
    obtainability and estimated uptime (the scenario's; ANY_SINGLE_ZONE: every shard in one zone)."""
    _advice_allowed(cloud, "capacity")
    p = cloud.scenario.project
    size = int(body.get("size") or 1)
    selections = (body.get("instanceFlexibilityPolicy") or {}).get("instanceSelections") or {}
    machines = [m for selection in selections.values() for m in selection.get("machineTypes", [])]
    asked = [z["zone"].rsplit("/", 1)[-1] for z in (body.get("distributionPolicy") or {}).get("zones", [])]
    zones = [z for z in asked or cloud.scenario.zones if region_of(z) == region and z in cloud.scenario.zones]
    recommendations = []
    for zone in zones:
        offer = cloud.scenario.zones[zone]
        machine = next((m for m in machines if m in offer.machine_types), None)
        if machine is None:
            continue
        recommendations.append(
            {
                "scores": {"obtainability": offer.obtainability, "estimatedUptime": f"{offer.estimated_uptime_s:g}s"},
                "shards": [
                    {
                        "zone": f"{API}/projects/{p}/zones/{zone}",
                        "machineType": machine,
                        "instanceCount": size,
                        "provisioningModel": "SPOT",
                    }
                ],
            }
        )
    return {"recommendations": recommendations}


HISTORY_DAYS = 30


def capacity_history(cloud: SimCloud, region: str, body: dict) -> dict:
    """advice.capacityHistory of one zone: 30 daily records of the scenario's preemption rate (and Spot price)."""
    _advice_allowed(cloud, "capacityHistory")
    p = cloud.scenario.project
    machine = (body.get("instanceProperties") or {}).get("machineType", "")
    zone = ((body.get("locationPolicy") or {}).get("location") or "").rsplit("/", 1)[-1]
    offer = cloud.scenario.zones.get(zone)
    if offer is None or region_of(zone) != region:
        raise SimError(404, f"The resource 'projects/{p}/zones/{zone}' was not found")
    if machine.startswith("n1-"):
        raise SimError(400, "Capacity history is not available for N1 machine types with GPUs", reason="invalid")
    if machine not in offer.machine_types:
        return {"location": f"{API}/projects/{p}/zones/{zone}", "machineType": machine}  # no VMs there: no history
    types = body.get("types") or ["PREEMPTION", "PRICE"]
    day, now = 86400.0, time.time()  # the history ends today (wall clock), whatever the simulated time
    days = [(now - (HISTORY_DAYS - i) * day, now - (HISTORY_DAYS - i - 1) * day) for i in range(HISTORY_DAYS)]
    answer: dict = {"location": f"{API}/projects/{p}/zones/{zone}", "machineType": machine}
    if "PREEMPTION" in types:
        answer["preemptionHistory"] = [
            {"interval": {"startTime": stamp(a), "endTime": stamp(b)}, "preemptionRate": offer.preemption_rate}
            for a, b in days
        ]
    if "PRICE" in types and offer.spot_price is not None:
        units, nanos = int(offer.spot_price), round((offer.spot_price % 1) * 1e9)
        answer["priceHistory"] = [
            {
                "interval": {"startTime": stamp(a), "endTime": stamp(b)},
                "listPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
            }
            for a, b in days
        ]
    return answer
