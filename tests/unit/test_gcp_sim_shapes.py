"""The simulated Google Cloud answers in the shape of Google's recorded responses (tests/fixtures): every key a
recording has, the sim's answer has, with the same JSON type, so the sim cannot drift from what Google sends.
Asked over HTTP, as the gcp target asks."""

from __future__ import annotations

import json

import pytest
import requests

from stacks.targets.gcp.sim.cloud import SimCloud
from stacks.targets.gcp.sim.scenario import load_scenario
from stacks.targets.gcp.sim.server import SimServer
from tests.support.recorded_api import FIXTURES

P = "/compute/v1/projects/p1"
# The recordings' project p1 and its europe-west4 (tests/fixtures/compute): a Spot group there with 8 vCPUs
# against PREEMPTIBLE_CPUS 4 is refused with the recorded quota message; europe-west4-a is dry.
SCENARIO = {
    "speedup": 1,
    "regions": {
        "europe-west4": {
            "quotas": {"PREEMPTIBLE_CPUS": 4, "G2_CPUS": 48},
            "gpu_families": {
                "GPUS_PER_GPU_FAMILY": {"NVIDIA_H200": 8},
                "PREEMPTIBLE_GPUS_PER_GPU_FAMILY": {"NVIDIA_H100": 16},
            },
        }
    },
}


def json_type(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object", type(None): "null"}[type(value)]


def shape_problems(recorded, answered, at: str = "$") -> list[str]:
    """Where `answered` lacks a key of `recorded` or has another type; a list's first items are compared."""
    if json_type(recorded) != json_type(answered):
        return [f"{at}: recorded {json_type(recorded)}, sim {json_type(answered)}"]
    if isinstance(recorded, dict):
        problems = []
        for key, value in recorded.items():
            if key not in answered:
                problems.append(f"{at}.{key}: missing")
            else:
                problems += shape_problems(value, answered[key], f"{at}.{key}")
        return problems
    if isinstance(recorded, list) and recorded:
        if not answered:
            return [f"{at}: recorded {len(recorded)} item(s), sim none"]
        return shape_problems(recorded[0], answered[0], f"{at}[0]")
    return []


def test_the_shape_check_finds_a_missing_key_and_a_changed_type():
    recorded = {"items": [{"error": {"code": "X", "message": "m"}}], "n": 1}
    assert shape_problems(recorded, {"items": [{"error": {"code": "X"}}], "n": "1"}) == [
        "$.items[0].error.message: missing",
        "$.n: recorded number, sim string",
    ]
    assert shape_problems(recorded, {"items": [], "n": 2}) == ["$.items: recorded 1 item(s), sim none"]


@pytest.fixture(scope="module")
def sim():
    cloud = SimCloud(load_scenario(overrides=SCENARIO))
    with SimServer(cloud) as server:
        yield server


def recording(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def ask(sim, method: str, path: str, **kwargs) -> requests.Response:
    return requests.request(method, sim.url + path, timeout=10, **kwargs)


@pytest.mark.parametrize(
    "fixture, path",
    [
        ("compute/project_p1.json", P),
        ("compute/region_europe-west4.json", f"{P}/regions/europe-west4"),
        ("compute/accelerator_type_nvidia-l4.json", f"{P}/zones/europe-west4-a/acceleratorTypes/nvidia-l4"),
        ("compute/machine_type_g2-standard-8.json", f"{P}/zones/europe-west4-a/machineTypes/g2-standard-8"),
        (
            "cloudquotas/quota_info_gpus_per_gpu_family.json",
            "/v1/projects/p1/locations/global/services/compute.googleapis.com/quotaInfos/"
            "GPUS-PER-GPU-FAMILY-per-project-region",
        ),
        (
            "cloudquotas/quota_info_preemptible_gpus_per_gpu_family.json",
            "/v1/projects/p1/locations/global/services/compute.googleapis.com/quotaInfos/"
            "PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region",
        ),
        ("billing/skus_page1.json", "/v1/services/6F81-5844-456A/skus?pageSize=2&currencyCode=USD"),
    ],
)
def test_a_read_answers_in_the_recorded_shape(sim, fixture, path):
    resp = ask(sim, "GET", path)
    assert resp.status_code == 200, resp.text
    assert shape_problems(recording(fixture), resp.json()) == []


def test_a_zone_without_the_gpu_answers_the_recorded_404(sim):
    resp = ask(sim, "GET", f"{P}/zones/europe-west1-c/acceleratorTypes/nvidia-l4")
    assert resp.status_code == 404
    recorded = recording("compute/error_404_accelerator_type.json")
    assert shape_problems(recorded, resp.json()) == []
    assert resp.json()["error"]["message"] == recorded["error"]["message"].replace("europe-west4-a", "europe-west1-c")


def spot_template(name: str, machine_type: str = "g2-standard-8") -> dict:
    """An instance template as google-cloud-compute sends it (camelCase JSON, int64 as strings)."""
    return {
        "name": name,
        "properties": {
            "machineType": machine_type,
            "guestAccelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": 1}],
            "scheduling": {"provisioningModel": "SPOT"},
            "disks": [{"boot": True, "initializeParams": {"diskSizeGb": "100", "diskType": "pd-balanced"}}],
        },
    }


def group_errors(sim, zone: str, group: str, machine_type: str) -> dict:
    ask(sim, "POST", f"{P}/global/instanceTemplates", json=spot_template(f"{group}-tpl", machine_type))
    body = {"name": group, "baseInstanceName": group, "instanceTemplate": f"global/instanceTemplates/{group}-tpl"}
    ask(sim, "POST", f"{P}/zones/{zone}/instanceGroupManagers", json={**body, "targetSize": 1})
    resp = ask(sim, "GET", f"{P}/zones/{zone}/instanceGroupManagers/{group}/listErrors")
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_list_errors_answer_the_recorded_shape_and_words_for_capacity_and_quota(sim):
    dry = group_errors(sim, "europe-west4-a", "dry", "g2-standard-4")  # 4 vCPUs fit; the zone is dry for an hour
    recorded = recording("compute/list_errors_zone_exhausted.json")
    assert shape_problems(recorded, dry) == []
    assert dry["items"][0]["error"] == recorded["items"][0]["error"]

    sim.cloud.skip(3600)  # capacity is back in europe-west4-a; 8 vCPUs do not fit in PREEMPTIBLE_CPUS 4
    quota = group_errors(sim, "europe-west4-a", "short", "g2-standard-8")
    recorded = recording("compute/list_errors_quota_exceeded.json")
    assert shape_problems(recorded, quota) == []
    assert quota["items"][0]["error"] == recorded["items"][0]["error"]


def test_a_resize_answers_an_operation_of_the_recorded_shape(sim):
    ask(sim, "POST", f"{P}/global/instanceTemplates", json=spot_template("resized-tpl"))
    body = {"name": "resized", "instanceTemplate": "global/instanceTemplates/resized-tpl", "targetSize": 0}
    ask(sim, "POST", f"{P}/zones/europe-west4-b/instanceGroupManagers", json=body)
    resp = ask(sim, "POST", f"{P}/zones/europe-west4-b/instanceGroupManagers/resized/resize?size=0")
    assert resp.status_code == 200, resp.text
    assert shape_problems(recording("vm/resize_operation.json"), resp.json()) == []
