"""Compute Engine's word on Spot capacity per zone, for the ranking of a run's zones (stacks.runs.zone_ranking):

- `advice.capacity` (POST .../regions/{region}/advice/capacity; Preview, not every project may call it): for the
  run's machine type, Spot, its node count in one zone (`ANY_SINGLE_ZONE`), one recommendation per zone with an
  obtainability score (0..1) and an estimated uptime (a duration, "3600s").
- `advice.capacityHistory` (POST .../regions/{region}/advice/capacityHistory, one zone a call): the daily
  preemption rate and Spot price of the machine type; Google gives none for N1 machines with GPUs.

Either may answer 403/404 (Preview not enabled for the project, or the method unknown where it runs): that is "no
advice", said once in `note`, never a failure. Answers are kept for the life of the process (one ask per command).
"""

from __future__ import annotations

from stacks.targets.advice import CapacityAdvice, ZoneAdvice
from stacks.targets.gcp import api
from stacks.targets.gcp.gpus import region_of

CALL_TIMEOUT_S = 20.0
_ASKED: dict[tuple, CapacityAdvice] = {}


def capacity_advice(config, lang: str, zones: list[str]) -> CapacityAdvice:
    settings = config.language(lang)
    if not settings.spot or not zones:
        return CapacityAdvice(note="no advice: not a Spot run" if zones else "no advice: no zones")
    machine = settings.gcp.machine_type
    key = (config.gcp.project, machine, settings.nodes, tuple(zones))
    if key not in _ASKED:
        _ASKED[key] = _ask(config.gcp.project, machine, settings.nodes, zones)
    return _ASKED[key]


def _ask(project: str, machine: str, nodes: int, zones: list[str]) -> CapacityAdvice:
    from google.api_core import exceptions as gexc

    try:
        client = api.compute_client("AdviceClient")
    except api.client_failures() as exc:
        return CapacityAdvice(note=f"no advice: {api.exception_message(exc)}")
    scores: dict[str, dict] = {}
    notes: list[str] = []
    regions = list(dict.fromkeys(region_of(zone) for zone in zones))
    try:
        for region in regions:
            in_region = [z for z in zones if region_of(z) == region]
            scores.update(_capacity(client, project, region, machine, nodes, in_region))
    except (gexc.Forbidden, gexc.PermissionDenied, gexc.NotFound) as exc:
        notes.append(f"no capacity advice ({exc.code}: {_first_line(exc)})")
    except api.client_failures() as exc:
        notes.append(f"no capacity advice ({_first_line(exc)})")
    history: dict[str, dict] = {}
    if machine.startswith("n1-"):
        notes.append("no capacity history for N1 machines with GPUs")
    else:
        try:
            for zone in zones:
                history[zone] = _history(client, project, zone, machine)
        except (gexc.Forbidden, gexc.PermissionDenied, gexc.NotFound) as exc:
            notes.append(f"no capacity history ({exc.code}: {_first_line(exc)})")
        except api.client_failures() as exc:
            notes.append(f"no capacity history ({_first_line(exc)})")
    by_zone = {
        zone: ZoneAdvice(zone, **scores.get(zone, {}), **history.get(zone, {}))
        for zone in zones
        if zone in scores or zone in history
    }
    return CapacityAdvice(by_zone, "; ".join(notes))


def _capacity(client, project: str, region: str, machine: str, nodes: int, zones: list[str]) -> dict[str, dict]:
    """advice.capacity for `nodes` Spot VMs of `machine` in one of `zones` -> zone: {obtainability, uptime}."""
    from google.cloud import compute_v1

    request = compute_v1.CapacityAdviceRequest(
        size=nodes,
        instance_properties=compute_v1.CapacityAdviceRequestInstanceProperties(
            scheduling=compute_v1.CapacityAdviceRequestInstancePropertiesScheduling(provisioning_model="SPOT")
        ),
        instance_flexibility_policy=compute_v1.CapacityAdviceRequestInstanceFlexibilityPolicy(
            instance_selections={
                "run": compute_v1.CapacityAdviceRequestInstanceFlexibilityPolicyInstanceSelection(
                    machine_types=[machine]
                )
            }
        ),
        distribution_policy=compute_v1.CapacityAdviceRequestDistributionPolicy(
            target_shape="ANY_SINGLE_ZONE",
            zones=[
                compute_v1.CapacityAdviceRequestDistributionPolicyZoneConfiguration(zone=f"zones/{z}") for z in zones
            ],
        ),
    )
    answer = client.capacity(
        project=project, region=region, capacity_advice_request_resource=request, timeout=CALL_TIMEOUT_S
    )
    out: dict[str, dict] = {}
    for recommendation in answer.recommendations:
        shard_zones = {shard.zone.rsplit("/", 1)[-1] for shard in recommendation.shards if shard.zone}
        if len(shard_zones) != 1:
            continue  # a recommendation across zones says nothing of one zone
        scores = recommendation.scores
        figures = {
            "obtainability": scores.obtainability if "obtainability" in scores else None,
            "estimated_uptime_s": _seconds(scores.estimated_uptime) if "estimated_uptime" in scores else None,
        }
        zone = shard_zones.pop()
        best = out.get(zone)
        if best is None or (figures["obtainability"] or 0) > (best["obtainability"] or 0):
            out[zone] = figures
    return out


def _history(client, project: str, zone: str, machine: str) -> dict:
    """advice.capacityHistory of `machine` (Spot) in `zone` -> {preemption_rate (mean), spot_price (latest)}."""
    from google.cloud import compute_v1

    request = compute_v1.CapacityHistoryRequest(
        instance_properties=compute_v1.CapacityHistoryRequestInstanceProperties(
            machine_type=machine,
            scheduling=compute_v1.CapacityHistoryRequestInstancePropertiesScheduling(provisioning_model="SPOT"),
        ),
        location_policy=compute_v1.CapacityHistoryRequestLocationPolicy(location=f"zones/{zone}"),
        types=["PREEMPTION", "PRICE"],
    )
    answer = client.capacity_history(
        project=project, region=region_of(zone), capacity_history_request_resource=request, timeout=CALL_TIMEOUT_S
    )
    rates = [r.preemption_rate for r in answer.preemption_history if "preemption_rate" in r]
    prices = [r.list_price for r in answer.price_history if "list_price" in r]
    return {
        "preemption_rate": sum(rates) / len(rates) if rates else None,
        "spot_price": prices[-1].units + prices[-1].nanos / 1e9 if prices else None,
    }


def _seconds(duration: str) -> float | None:
    """A JSON Duration ("3600s", "5400.5s") in seconds; None when it is not one."""
    try:
        return float(duration.removesuffix("s"))
    except (AttributeError, ValueError):
        return None


def _first_line(exc: Exception) -> str:
    return api.exception_message(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
