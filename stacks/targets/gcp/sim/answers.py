"""The simulated cloud's answers as JSON, in the shape of Google's (the recordings in tests/fixtures are the
reference: tests/unit/test_gcp_sim_shapes.py checks every key and type against them).

References: the Compute Engine v1 REST resources (project, region, zone, acceleratorType, machineType,
instanceTemplate, instanceGroupManager, managedInstance, operation;
https://cloud.google.com/compute/docs/reference/rest/v1), Cloud Quotas' QuotaInfo
(https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.services.quotaInfos), the Billing
Catalog's Sku (https://cloud.google.com/billing/v1/how-tos/catalog-api).
"""

from __future__ import annotations

import hashlib

from stacks.targets.gcp.sim.cloud import Group, SimCloud, SimError, stamp
from stacks.targets.gcp.sim.flex_start import ResizeRequest
from stacks.targets.gcp.sim.scenario import region_of

API = "https://www.googleapis.com/compute/v1"
EPOCH = "1969-12-31T16:00:00.000-08:00"  # Compute Engine's creationTimestamp of built-in resources


def numeric_id(text: str) -> str:
    return str(int(hashlib.sha256(text.encode()).hexdigest()[:15], 16))


def error_body(exc: SimError) -> dict:
    return {
        "error": {
            "code": exc.status,
            "message": exc.message,
            "errors": [{"message": exc.message, "domain": "global", "reason": exc.reason}],
        }
    }


def quota_list(cloud: SimCloud, scope: str) -> list[dict]:
    quotas = cloud.scenario.global_quotas if scope == "global" else cloud.scenario.regions[scope].quotas
    return [{"metric": m, "limit": q.limit, "usage": cloud.usage(scope, m)} for m, q in quotas.items()]


def project(cloud: SimCloud) -> dict:
    p = cloud.scenario.project
    return {
        "kind": "compute#project",
        "id": numeric_id(p),
        "creationTimestamp": EPOCH,
        "name": p,
        "commonInstanceMetadata": {
            "kind": "compute#metadata",
            "fingerprint": "c2ltdWxhdGVk",
            "items": [{"key": "enable-oslogin", "value": "TRUE"}],
        },
        "quotas": quota_list(cloud, "global"),
        "selfLink": f"{API}/projects/{p}",
        "defaultServiceAccount": f"{numeric_id(p)}-compute@developer.gserviceaccount.com",
        "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS",
        "defaultNetworkTier": "PREMIUM",
        "vmDnsSetting": "ZONAL_ONLY",
    }


def region(cloud: SimCloud, name: str) -> dict:
    if name not in cloud.scenario.regions:
        raise SimError(404, f"The resource 'projects/{cloud.scenario.project}/regions/{name}' was not found")
    p = cloud.scenario.project
    return {
        "kind": "compute#region",
        "id": numeric_id(name),
        "creationTimestamp": EPOCH,
        "name": name,
        "description": name,
        "status": "UP",
        "zones": [f"{API}/projects/{p}/zones/{z}" for z in cloud.scenario.zones if region_of(z) == name],
        "quotas": quota_list(cloud, name),
        "selfLink": f"{API}/projects/{p}/regions/{name}",
        "supportsPzs": False,
    }


def zone(cloud: SimCloud, name: str) -> dict:
    if name not in cloud.scenario.zones:
        raise SimError(404, f"The resource 'projects/{cloud.scenario.project}/zones/{name}' was not found")
    p = cloud.scenario.project
    return {
        "kind": "compute#zone",
        "id": numeric_id(name),
        "creationTimestamp": EPOCH,
        "name": name,
        "description": name,
        "status": "UP",
        "region": f"{API}/projects/{p}/regions/{region_of(name)}",
        "selfLink": f"{API}/projects/{p}/zones/{name}",
        "availableCpuPlatforms": ["Intel Cascade Lake", "Intel Ice Lake"],
        "supportsPzs": False,
    }


def accelerator_type(cloud: SimCloud, zone_name: str, name: str) -> dict:
    p = cloud.scenario.project
    offer = cloud.scenario.zones.get(zone_name)
    if offer is None or name not in offer.accelerators:
        raise SimError(404, f"The resource 'projects/{p}/zones/{zone_name}/acceleratorTypes/{name}' was not found")
    return {
        "kind": "compute#acceleratorType",
        "id": numeric_id(f"{zone_name}/{name}"),
        "creationTimestamp": EPOCH,
        "name": name,
        "description": name.replace("-", " ").upper(),
        "zone": f"{API}/projects/{p}/zones/{zone_name}",
        "selfLink": f"{API}/projects/{p}/zones/{zone_name}/acceleratorTypes/{name}",
        "maximumCardsPerInstance": 8,
    }


def machine_type(cloud: SimCloud, zone_name: str, name: str) -> dict:
    p = cloud.scenario.project
    offer = cloud.scenario.zones.get(zone_name)
    shape = cloud.scenario.machine_types.get(name)
    if offer is None or shape is None or name not in offer.machine_types:
        raise SimError(404, f"The resource 'projects/{p}/zones/{zone_name}/machineTypes/{name}' was not found")
    doc = {
        "kind": "compute#machineType",
        "id": numeric_id(f"{zone_name}/{name}"),
        "creationTimestamp": EPOCH,
        "name": name,
        "description": f"{shape.vcpus} vCPUs, {shape.memory_mb // 1024} GB RAM",
        "guestCpus": shape.vcpus,
        "memoryMb": shape.memory_mb,
        "imageSpaceGb": 0,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168",
        "zone": zone_name,
        "selfLink": f"{API}/projects/{p}/zones/{zone_name}/machineTypes/{name}",
        "isSharedCpu": False,
    }
    if shape.gpus:
        doc["accelerators"] = [{"guestAcceleratorType": t, "guestAcceleratorCount": n} for t, n in shape.gpus.items()]
    return doc


def template(cloud: SimCloud, name: str) -> dict:
    found = cloud.templates.get(name)
    if found is None:
        raise SimError(404, f"The resource '{cloud.template_url(name)}' was not found")
    return {"kind": "compute#instanceTemplate", **found, "selfLink": f"{API}/{cloud.template_url(name)}"}


def group(cloud: SimCloud, g: Group) -> dict:
    p = cloud.scenario.project
    current = {a: 0 for a in ("none", "creating", "creatingWithoutRetries", "recreating", "deleting", "abandoning")}
    current |= {"restarting": 0, "refreshing": 0, "verifying": 0, "resuming": 0, "starting": 0, "stopping": 0}
    for vm in g.instances.values():
        key = {"NONE": "none", "CREATING": "creating", "RECREATING": "recreating", "DELETING": "deleting"}[vm.action]
        current[key] += 1
    stable = all(vm.action == "NONE" for vm in g.instances.values())
    doc = {
        "kind": "compute#instanceGroupManager",
        "id": str(g.id),
        "creationTimestamp": g.created,
        "name": g.name,
        "instanceTemplate": f"{API}/{cloud.template_url(g.template)}",
        "versions": [{"instanceTemplate": f"{API}/{cloud.template_url(g.template)}", "targetSize": {}}],
        "instanceGroup": f"{API}/projects/{p}/{g.scope}/instanceGroups/{g.name}",
        "baseInstanceName": g.base_instance_name,
        "currentActions": current,
        "status": {"isStable": stable, "versionTarget": {"isReached": True}},
        "targetSize": g.target_size,
        "selfLink": f"{API}/{cloud.group_url(g.scope, g.name)}",
    }
    doc["zone" if g.scope.startswith("zones/") else "region"] = f"{API}/projects/{p}/{g.scope}"
    return doc


def managed_instances(cloud: SimCloud, g: Group) -> dict:
    p = cloud.scenario.project
    items = []
    for vm in sorted(g.instances.values(), key=lambda v: v.name):
        where = vm.zone or (g.location if g.scope.startswith("zones/") else "")
        item = {
            "instance": f"{API}/projects/{p}/zones/{where}/instances/{vm.name}",
            "currentAction": vm.action,
            "name": vm.name,
            "version": {"instanceTemplate": f"{API}/{cloud.template_url(g.template)}"},
        }
        if vm.status:
            item |= {"id": str(vm.id), "instanceStatus": vm.status}
        items.append(item)
    return {"managedInstances": items}


def resize_request(cloud: SimCloud, g: Group, r: ResizeRequest) -> dict:
    """An InstanceGroupManagerResizeRequest (Compute Engine v1 REST reference, instanceGroupManagerResizeRequests)."""
    p = cloud.scenario.project
    doc = {
        "kind": "compute#instanceGroupManagerResizeRequest",
        "id": str(r.id),
        "creationTimestamp": r.created,
        "name": r.name,
        "description": r.description,
        "zone": f"{API}/projects/{p}/{g.scope}",
        "resizeBy": r.resize_by,
        "state": r.state,
        "selfLink": f"{API}/{cloud.group_url(g.scope, g.name)}/resizeRequests/{r.name}",
    }
    if r.error is not None:
        doc["status"] = {"error": {"errors": [dict(r.error)]}, "lastAttempt": {"error": {"errors": [dict(r.error)]}}}
    return doc


def list_errors(g: Group) -> dict:
    return {"items": list(g.errors)}


WAIT_KEY = "_simulated_wait_s"  # taken off the answer by the server, which waits that long outside the lock


def operation(cloud: SimCloud, kind: str, target: str, scope: str | None) -> dict:
    """A finished Operation (the sim applies a change at once); kept for zoneOperations/globalOperations.get.
    The answer comes after the scenario's `operation_s` of its kind (simulated seconds): the client that waits
    on it (Terraform, the lifecycle's destroy) is busy that long, as on Compute Engine. It is the request that
    waits, never a RUNNING operation: google-cloud-compute polls an operation at Google's own endpoint,
    whatever endpoint its client was given (transports/base.py `_zone_operations_client`)."""
    p = cloud.scenario.project
    now = stamp()
    name = f"operation-{numeric_id(target + now)}-sim"
    where = f"{API}/projects/{p}/{scope}" if scope else None
    doc = {
        "kind": "compute#operation",
        "id": numeric_id(name),
        "name": name,
        "operationType": kind,
        "targetLink": f"{API}/{target}",
        "targetId": numeric_id(target),
        "status": "DONE",
        "user": f"simulated@{p}.iam.gserviceaccount.com",
        "progress": 100,
        "insertTime": now,
        "startTime": now,
        "endTime": now,
        "selfLink": f"{API}/projects/{p}/{scope or 'global'}/operations/{name}",
    }
    if where:
        doc["zone" if scope.startswith("zones/") else "region"] = where
    cloud.operations[name] = doc
    return {**doc, WAIT_KEY: cloud.scenario.operation_s.get(kind.removeprefix("compute."), 0.0)}


def quota_info(cloud: SimCloud, quota_id: str) -> dict:
    """Cloud Quotas quotaInfos.get of a Compute quota: the family quotas per (region, gpu_family), and each
    regional metric per region (NVIDIA-L4-GPUS-per-project-region ...); limits only, as Cloud Quotas reports."""
    p = cloud.scenario.project
    metric = quota_id.rsplit("-per-project", 1)[0].replace("-", "_")
    regions = sorted(cloud.scenario.regions)
    infos = []
    for r in regions:
        spec = cloud.scenario.regions[r]
        for family, q in spec.gpu_families.get(metric, {}).items():
            infos.append(_dimension({"region": r, "gpu_family": family}, q.limit, [r]))
        if metric in spec.quotas:
            infos.append(_dimension({"region": r}, spec.quotas[metric].limit, [r]))
    if quota_id.endswith("-per-project") and metric in cloud.scenario.global_quotas:
        infos.append(_dimension({}, cloud.scenario.global_quotas[metric].limit, ["global"]))
    family = "GPU_FAMILY" in metric
    if not infos and not family:
        raise SimError(404, f"QuotaInfo {quota_id} not found for compute.googleapis.com in project {p}")
    if family:
        infos.append({"dimensions": {}, "details": {"value": "0"}, "applicableLocations": regions})
    dims = ["region", "gpu_family"] if family else ([] if quota_id.endswith("-per-project") else ["region"])
    return {
        "name": f"projects/{p}/locations/global/services/compute.googleapis.com/quotaInfos/{quota_id}",
        "quotaId": quota_id,
        "metric": f"compute.googleapis.com/{metric.lower()}",
        "service": "compute.googleapis.com",
        "isPrecise": True,
        "containerType": "PROJECT",
        "dimensions": dims,
        "metricDisplayName": metric.replace("_", " ").title(),
        "quotaDisplayName": quota_id,
        "metricUnit": "1",
        "isFixed": False,
        "dimensionsInfos": infos,
        "isConcurrent": False,
        "serviceRequestQuotaUri": "https://console.cloud.google.com/iam-admin/quotas",
    }


def _dimension(dims: dict, limit: float, where: list[str]) -> dict:
    return {"dimensions": dims, "details": {"value": str(int(limit))}, "applicableLocations": where}


def skus(cloud: SimCloud) -> list[dict]:
    """The scenario's prices as Compute Engine SKUs, worded as the catalogue says Google words them."""
    from stacks.targets.gcp.gpus import CATALOGUE, GPU_TYPES

    words = {prefix: w for row in CATALOGUE.series.values() for prefix, w in row.sku_names if w}
    out = []
    for r, prices in sorted(cloud.scenario.prices.items()):
        for kind, table, group_name, unit in (("Core", prices.cores, "CPU", "h"), ("Ram", prices.ram, "RAM", "GiBy.h")):
            for prefix, price in table.items():
                if prefix not in words:
                    continue
                for spot, usd in ((False, price.on_demand), (True, price.spot)):
                    text = f"{'Spot Preemptible ' if spot else ''}{words[prefix]} {kind} running in {r}"
                    out.append(_sku(text, r, group_name, unit, usd, spot))
        for gpu_name, price in prices.gpus.items():
            gpu = GPU_TYPES.get(gpu_name)
            if gpu is None:
                continue
            for spot, usd in ((False, price.on_demand), (True, price.spot)):
                how = "attached to Spot Preemptible VMs running in" if spot else "running in"
                out.append(_sku(f"{gpu.sku} GPU {how} {r}", r, "GPU", "h", usd, spot))
    return out


def _sku(description: str, region_name: str, resource_group: str, unit: str, usd: float, spot: bool) -> dict:
    sku_id = "-".join(numeric_id(description)[i : i + 4] for i in (0, 4, 8))
    units, nanos = int(usd), round((usd - int(usd)) * 1e9)
    return {
        "name": f"services/6F81-5844-456A/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": resource_group,
            "usageType": "Preemptible" if spot else "OnDemand",
        },
        "serviceRegions": [region_name],
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                        }
                    ],
                    "usageUnitDescription": "hour" if unit == "h" else "gibibyte hour",
                    "baseUnit": "s" if unit == "h" else "By.s",
                    "baseUnitDescription": "second" if unit == "h" else "byte second",
                    "baseUnitConversionFactor": 3600 if unit == "h" else 3865470566400,
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-11-20T08:12:31.077Z",
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL", "regions": [region_name]},
    }


def sku_page(cloud: SimCloud, page_size: int, token: str) -> dict:
    every = skus(cloud)
    start = int(token or 0)
    end = start + max(page_size, 1)
    return {"skus": every[start:end], "nextPageToken": str(end) if end < len(every) else ""}


def public_image(project_name: str, family: str) -> dict:
    """images.getFromFamily of a public image project (cos-cloud, ...): a READY image of the family, as the boot
    image check reads it (https://cloud.google.com/compute/docs/reference/rest/v1/images/getFromFamily)."""
    name = f"{family}-simulated"
    return {
        "kind": "compute#image",
        "id": numeric_id(f"{project_name}/{family}"),
        "name": name,
        "family": family,
        "status": "READY",
        "selfLink": f"{API}/projects/{project_name}/global/images/{name}",
    }
