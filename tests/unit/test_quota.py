"""GPU quota preflight against recorded Compute API responses served to the real client."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.project import Project
from stacks.targets.gcp.quota import ENDPOINT_ENV, ComputeQuotas, QuotaError, choose_zone, choose_zones, quota_id
from tests.support.compute_api import ACCEL, ACCEL_ANY, DEV, MACHINE, PROJECT, REGION, compute_api, fixture, with_quotas
from tests.support.recorded_api import RecordedApi

runner = CliRunner()


def dev_config(*sets: str):
    return Project.discover().load("dev", [*DEV, *sets])


def paths(api: RecordedApi, pattern: str) -> list[str]:
    return [s.path for s in api.requests("GET", pattern)]


def quota(*args: str):
    return runner.invoke(app, ["quota", "--env", "dev", *[a for s in DEV for a in ("--set", s)], *args])


def test_enough_quota_picks_first_zone_with_spot_metric(project, monkeypatch):
    with compute_api() as api:
        decision = choose_zone(dev_config(), "fr", compute=ComputeQuotas("p1", endpoint=api.url))
        sent = paths(api, ".*")
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        r = quota()
    assert (decision.zone, decision.region, decision.metric, decision.needed) == (
        "europe-west4-a",
        "europe-west4",
        "PREEMPTIBLE_NVIDIA_L4_GPUS",
        1,
    )
    glob, zone = decision.rows
    assert (glob.scope, glob.metric, glob.limit, glob.usage, glob.ok) == ("global", "GPUS_ALL_REGIONS", 8, 3, True)
    assert (zone.zone, zone.limit, zone.usage, zone.ok, zone.note) == ("europe-west4-a", 8, 2, True, "chosen")
    assert sent == [
        PROJECT,
        REGION.format("europe-west4"),
        ACCEL.format("europe-west4-a"),
        MACHINE.format("europe-west4-a", "g2-standard-8"),
    ]  # its vCPUs, for the CPU quota
    assert all(s.headers.get("Authorization") is None for s in api.seen)  # anonymous on an override
    # the CLI: a table and a decision per language, one regions.get for both
    assert r.exit_code == 0, r.output
    assert "train-fr → europe-west4-a (PREEMPTIBLE_NVIDIA_L4_GPUS)" in r.output
    assert "train-en → europe-west4-a (PREEMPTIBLE_NVIDIA_L4_GPUS)" in r.output
    assert "GPUS_ALL_REGIONS" in r.output
    assert len(paths(api, REGION.format("europe-west4"))) == 1 + 1
    assert len(paths(api, PROJECT)) == 1 + 1


def test_languages_together_do_not_count_the_same_free_gpus(project):
    # 2 Spot L4 left in europe-west4: fr takes both, en must go to europe-west1.
    ew4 = with_quotas(fixture("region_europe-west4.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=(8, 6))
    with compute_api(ew4=ew4) as api:
        fr, en = choose_zones(
            dev_config("defaults.nodes=2"), ["fr", "en"], compute=ComputeQuotas("p1", api.url)
        ).values()
    assert (fr.zone, en.zone) == ("europe-west4-a", "europe-west1-b")
    assert en.rows[0].usage == 3 + 2  # global usage includes fr's reservation
    assert en.rows[1].usage == 6 + 2 and en.rows[1].note == "0 free, needs 2; usage counts 2 for languages above"


def test_exhausted_region_falls_back_to_the_next_region(project, monkeypatch):
    # nodes=2 x 1 GPU: europe-west4 has 1 Spot L4 free, europe-west1 has 4.
    ew4 = with_quotas(fixture("region_europe-west4.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=(8, 7))
    with compute_api(ew4=ew4) as api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        decision = choose_zone(dev_config("defaults.nodes=2"), "fr")
        r = quota("--lang", "fr", "--set", "defaults.nodes=2")
    assert (decision.zone, decision.metric, decision.needed) == ("europe-west1-b", "PREEMPTIBLE_NVIDIA_L4_GPUS", 2)
    assert [(row.zone, row.ok, row.note) for row in decision.rows[1:]] == [
        ("europe-west4-a", False, "1 free, needs 2"),
        ("europe-west4-b", False, "1 free, needs 2"),
        ("europe-west4-c", False, "1 free, needs 2"),
        ("europe-west1-b", True, "chosen"),
    ]
    assert decision.rows[-1].limit == 4 and decision.rows[-1].usage == 0
    # no accelerator look-up where quota already rules a zone out
    assert paths(api, ACCEL_ANY) == [ACCEL.format("europe-west1-b")] * 2
    assert r.exit_code == 0, r.output
    assert "train-fr → europe-west1-b (PREEMPTIBLE_NVIDIA_L4_GPUS)" in r.output
    assert "train-en" not in r.output


@pytest.mark.parametrize("spot_quota", [None, (0, 0)], ids=["absent", "zero-limit"])
def test_without_spot_quota_spot_vms_use_the_on_demand_metric(project, spot_quota):
    ew4 = with_quotas(fixture("region_europe-west4.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=spot_quota)
    with compute_api(ew4=ew4) as api:
        decision = choose_zone(dev_config(), "fr", compute=ComputeQuotas("p1", api.url))
    assert (decision.zone, decision.metric) == ("europe-west4-a", "NVIDIA_L4_GPUS")
    row = decision.rows[1]
    assert (row.limit, row.usage) == (4, 1)
    assert "Spot VMs use on-demand quota" in row.note


def test_flex_start_vms_draw_on_the_preemptible_metrics(project):
    """The flex_start rung draws on preemptible quota, as Spot does, never the on-demand figure beside it."""
    ew4 = with_quotas(fixture("region_europe-west4.json"), NVIDIA_L4_GPUS=(4, 4), PREEMPTIBLE_CPUS=(64, 0))
    config = dev_config("defaults.capacity=[flex_start, on_demand]", "gcp.simulated={}")
    assert config.language("fr").rung == "flex_start" and not config.language("fr").spot
    with compute_api(ew4=ew4) as api:
        decision = choose_zone(config, "fr", compute=ComputeQuotas("p1", api.url))
    assert (decision.zone, decision.metric) == ("europe-west4-a", "PREEMPTIBLE_NVIDIA_L4_GPUS")
    assert decision.rows[1].note == "chosen"


def test_on_demand_vms_use_the_on_demand_metric(project):
    ew4 = with_quotas(fixture("region_europe-west4.json"), NVIDIA_L4_GPUS=(4, 4))
    with compute_api(ew4=ew4) as api:
        decision = choose_zone(dev_config("defaults.spot=false"), "fr", compute=ComputeQuotas("p1", api.url))
    # on-demand L4 in europe-west4 is used up; its Spot quota (6 free) must not count
    assert (decision.zone, decision.metric) == ("europe-west1-b", "NVIDIA_L4_GPUS")
    assert decision.rows[1].note == "0 free, needs 1"


def test_global_gpu_quota_exhausted_is_named_as_the_blocker(project, monkeypatch):
    glob = with_quotas(fixture("project_p1.json"), GPUS_ALL_REGIONS=(8, 8))
    with compute_api(project=glob) as api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        with pytest.raises(QuotaError) as caught:
            choose_zone(dev_config(), "fr")
        r = quota("--lang", "fr")
    err = caught.value
    assert err.exit_status == 3
    assert "the global GPU quota GPUS_ALL_REGIONS is the blocker" in err.summary
    assert "limit 8, usage 8, needs 1" in err.summary
    assert [(row.scope, row.metric, row.ok) for row in err.rows] == [("global", "GPUS_ALL_REGIONS", False)]
    assert "metric=compute.googleapis.com%2Fgpus_all_regions" in err.hint
    assert "--quota-id=GPUS-ALL-REGIONS-per-project --preferred-value=9" in err.hint
    assert paths(api, REGION.format("[^/]+")) == []  # nothing regional can help
    assert r.exit_code == 3
    assert "GPUS_ALL_REGIONS is the blocker" in r.output and "Traceback" not in r.output


def test_accelerator_not_offered_moves_to_the_next_zone_of_the_region(project):
    with compute_api(not_offered=["europe-west4-a"]) as api:
        decision = choose_zone(dev_config(), "fr", compute=ComputeQuotas("p1", api.url))
    assert (decision.zone, decision.metric) == ("europe-west4-b", "PREEMPTIBLE_NVIDIA_L4_GPUS")
    assert decision.rows[1].note == "nvidia-l4 not offered in europe-west4-a" and not decision.rows[1].ok
    assert paths(api, ACCEL_ANY) == [ACCEL.format("europe-west4-a"), ACCEL.format("europe-west4-b")]
    assert len(paths(api, REGION.format("europe-west4"))) == 1


def test_no_zone_fits_lists_every_zone_and_how_to_get_more(project, monkeypatch):
    ew4 = with_quotas(fixture("region_europe-west4.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=(8, 8))
    ew1 = with_quotas(fixture("region_europe-west1.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=(4, 4))
    with compute_api(ew4=ew4, ew1=ew1) as api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        r = quota("--lang", "fr")
    assert r.exit_code == 3
    assert "no zone fits train-fr: it needs 1 x nvidia-l4" in r.output
    table = [line.split() for line in r.output.splitlines() if line.strip().startswith("europe-west")]
    assert [t[:5] for t in table] == [
        [z, "PREEMPTIBLE_NVIDIA_L4_GPUS", lim, lim, "1"]
        for z, lim in [
            ("europe-west4-a", "8"),
            ("europe-west4-b", "8"),
            ("europe-west4-c", "8"),
            ("europe-west1-b", "4"),
            ("europe-west1-c", "4"),
        ]
    ]
    assert (
        "--quota-id=PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region --dimensions=region=europe-west4 --preferred-value=9"
    ) in r.output
    assert "metric=compute.googleapis.com%2Fpreemptible_nvidia_l4_gpus" in r.output
    assert r.output.index("in europe-west4 to >= 9") < r.output.index("in europe-west1 to >= 5")  # preference order
    assert "`gcp.zones` / `gcp.fallback_zones` in envs/dev.yaml" in r.output


PROJECT_404 = {
    "error": {
        "code": 404,
        "message": "The resource 'projects/p1' was not found",
        "errors": [{"message": "The resource 'projects/p1' was not found", "domain": "global", "reason": "notFound"}],
    }
}


@pytest.mark.parametrize(
    "status, body, message, hint",
    [
        (403, "compute/error_403_permission.json", "permission denied reading project p1", "roles/compute.viewer"),
        (
            403,
            "compute/error_403_api_disabled.json",
            "Compute Engine API is not enabled in project p1",
            "gcloud services enable compute.googleapis.com --project=p1",
        ),
        (
            404,
            PROJECT_404,
            "reading project p1: The resource 'projects/p1' was not found",
            "check `gcp.project` ('p1')",
        ),
    ],
    ids=["forbidden", "api-disabled", "no-project"],
)
def test_api_errors_are_exit_3_with_a_hint(project, monkeypatch, status, body, message, hint):
    with RecordedApi({("GET", PROJECT): (status, body)}) as api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        r = quota("--lang", "fr")
    assert r.exit_code == 3
    assert message in r.output and hint in r.output
    assert "Traceback" not in r.output


def test_unreachable_api_is_exit_3(project, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv(ENDPOINT_ENV, f"http://127.0.0.1:{port}")
    r = quota("--lang", "fr")
    assert r.exit_code == 3
    assert f"cannot reach the Compute Engine API at http://127.0.0.1:{port}" in r.output and ENDPOINT_ENV in r.output


def test_local_env_is_exit_2(project):
    r = runner.invoke(app, ["quota"])
    assert r.exit_code == 2
    assert "quota applies to gcp environments" in r.output


def test_quota_ids_follow_cloud_quotas_naming():
    assert quota_id("PREEMPTIBLE_NVIDIA_L4_GPUS") == "PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region"
    assert quota_id("NVIDIA_L4_GPUS") == "NVIDIA-L4-GPUS-per-project-region"
    assert quota_id("GPUS_ALL_REGIONS") == "GPUS-ALL-REGIONS-per-project"


def test_train_of_several_languages_checks_their_sum_before_applying(project, monkeypatch):
    # nodes=3: europe-west4 has 2 Spot L4 free, europe-west1 4: fr fits alone, en fits alone, not both.
    ew4 = with_quotas(fixture("region_europe-west4.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=(8, 6))
    from stacks.targets.gcp.target import GCP

    config = dev_config("defaults.nodes=3")
    with compute_api(ew4=ew4) as api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        assert choose_zone(config, "en").zone == "europe-west1-b"  # alone: fine
        GCP.preflight_together(config, ["fr"], None)
        # nodes=2: both fit, in different regions; each stack is placed where the sum was found to fit
        decided = GCP.preflight_together(dev_config("defaults.nodes=2"), ["fr", "en"], None)
        assert {lang: d.zone for lang, d in decided.items()} == {"fr": "europe-west4-a", "en": "europe-west1-b"}
        with pytest.raises(QuotaError) as refused:
            GCP.preflight_together(config, ["fr", "en"], None)
    assert "en would not fit beside fr; nothing was applied" in refused.value.message
    assert "--parallel 1" in refused.value.hint


@pytest.mark.parametrize("warning", [True, False], ids=["quotaStatusWarning", "metric-absent"])
def test_a_region_whose_quotas_regions_get_left_out_is_not_refused(project, warning):
    # Issue 38: regions.get is fail-open (`quotas` may be absent, quotaStatusWarning says why); the
    # preflight refused every zone as "not reported" while a missing GPUS_ALL_REGIONS passed.
    ew4 = fixture("region_europe-west4.json")
    if warning:
        ew4 = {
            **{k: v for k, v in ew4.items() if k != "quotas"},
            "quotaStatusWarning": {"code": "UNREACHABLE", "message": "quota data is temporarily unavailable"},
        }
    else:
        ew4 = with_quotas(ew4, PREEMPTIBLE_NVIDIA_L4_GPUS=None, NVIDIA_L4_GPUS=None)
    with compute_api(ew4=ew4) as api:
        decision = choose_zone(dev_config(), "fr", compute=ComputeQuotas("p1", api.url))
        asked = paths(api, ACCEL_ANY)
    assert decision.zone == "europe-west4-a" and decision.reported is False
    row = decision.rows[1]
    assert row.ok and row.limit is None and "the plan's quota guard checks the limit" in row.note
    assert ("quota data is temporarily unavailable" in row.note) is warning
    assert asked == [ACCEL.format("europe-west4-a")]  # the zone's offer is still checked


def test_an_unreported_metric_leaves_the_plan_guard_both_metrics(project, monkeypatch):
    from types import SimpleNamespace

    from stacks.targets.gcp import doctor, image
    from stacks.targets.gcp.target import GcpTarget

    ew4 = with_quotas(fixture("region_europe-west4.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=None, NVIDIA_L4_GPUS=None)
    with compute_api(ew4=ew4) as api:
        decision = choose_zone(dev_config(), "fr", compute=ComputeQuotas("p1", api.url))
    monkeypatch.setattr(image, "require_image", lambda ref, env: None)  # no registry here
    monkeypatch.setattr(
        doctor, "check_boot_image", lambda config, lang: SimpleNamespace(ok=True, name="boot", detail="")
    )
    placement = GcpTarget().preflight(dev_config(), "fr", None, decided=decision)
    assert placement.zone == "europe-west4-a"
    assert placement.quota_metrics == ["PREEMPTIBLE_NVIDIA_L4_GPUS", "NVIDIA_L4_GPUS"]


@pytest.mark.parametrize(
    ("quotas", "short"),
    [
        ({"G2_CPUS": (48, 44)}, "G2_CPUS 4 free, needs 8"),  # the family's own CPU quota
        ({"PREEMPTIBLE_CPUS": (16, 12)}, "PREEMPTIBLE_CPUS 4 free, needs 8"),  # Spot VMs draw on it where it exists
        ({"SSD_TOTAL_GB": (2048, 2000)}, "SSD_TOTAL_GB 48 free, needs 100"),  # pd-balanced boot disks
    ],
)
def test_cpu_and_disk_quota_join_the_gpu_quota(project, quotas, short):
    # Issue 38: a short CPU or disk quota only showed as the group's creation errors, while train waited 45 min.
    ew4 = with_quotas(fixture("region_europe-west4.json"), **quotas)
    with compute_api(ew4=ew4) as api:
        decision = choose_zone(dev_config(), "fr", compute=ComputeQuotas("p1", api.url))
    assert decision.zone == "europe-west1-b"
    assert [(r.zone, r.ok, r.note) for r in decision.rows[1:4]] == [
        (z, False, short) for z in ("europe-west4-a", "europe-west4-b", "europe-west4-c")
    ]
    with compute_api(ew4=ew4, ew1=with_quotas(fixture("region_europe-west1.json"), **quotas)) as api:
        with pytest.raises(QuotaError) as err:
            choose_zone(dev_config(), "fr", compute=ComputeQuotas("p1", api.url))
    metric = short.split()[0]
    assert (
        f"raise {metric} in europe-west4 to >=" in err.value.hint and f"--quota-id={quota_id(metric)}" in err.value.hint
    )


def test_languages_together_count_each_others_cpus(project):
    # 8 G2 CPUs free in europe-west4: fr's g2-standard-8 takes them, en goes to europe-west1.
    ew4 = with_quotas(fixture("region_europe-west4.json"), G2_CPUS=(48, 40))
    with compute_api(ew4=ew4) as api:
        fr, en = choose_zones(dev_config(), ["fr", "en"], compute=ComputeQuotas("p1", api.url)).values()
    assert (fr.zone, en.zone) == ("europe-west4-a", "europe-west1-b")
    assert en.rows[1].note == "G2_CPUS 0 free, needs 8; usage counts 1 for languages above"  # the GPU note too


# H100, H200 and B200 GPUs: regions.get reports no per-GPU metric for them; Cloud Quotas counts them under
# GPUS-PER-GPU-FAMILY-per-project-region (PREEMPTIBLE-... for Spot) with a gpu_family dimension. Recorded here
# as quotaInfos.get answers in the shape of the Cloud Quotas reference (QuotaInfo: dimensionsInfos ordered
# from more to less specific, each with dimensions, details.value as a string and applicableLocations).
QUOTA_INFO = "/v1/projects/p1/locations/global/services/compute.googleapis.com/quotaInfos/{}"
SPOT_FAMILY = QUOTA_INFO.format("PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region")
FAMILY = QUOTA_INFO.format("GPUS-PER-GPU-FAMILY-per-project-region")
H100 = [
    "languages.fr.gcp.machine_type=a3-highgpu-8g",
    "languages.fr.gcp.gpu.type=nvidia-h100-80gb",
    "languages.fr.gcp.gpu.count=8",
]


def family_api(spot_h100_limit: str = "16") -> RecordedApi:
    """p1 with room in GPUS_ALL_REGIONS, no H100 metric in regions.get, and the family quotas in Cloud Quotas."""
    import json

    from tests.support.recorded_api import FIXTURES

    spot = json.loads((FIXTURES / "cloudquotas" / "quota_info_preemptible_gpus_per_gpu_family.json").read_text())
    spot["dimensionsInfos"][0]["details"]["value"] = spot_h100_limit
    api = compute_api(project=with_quotas(fixture("project_p1.json"), GPUS_ALL_REGIONS=(64, 0)))
    api.routes[("GET", SPOT_FAMILY)] = (200, spot)
    api.routes[("GET", FAMILY)] = (200, "cloudquotas/quota_info_gpus_per_gpu_family.json")
    h100 = json.loads(json.dumps(fixture("accelerator_type_nvidia-l4.json")).replace("nvidia-l4", "nvidia-h100-80gb"))
    api.routes[("GET", PROJECT + "/zones/[^/]+/acceleratorTypes/nvidia-h100-80gb")] = (200, h100)
    return api


def test_an_h100_with_only_the_family_quota_is_decided_by_it(project, monkeypatch):
    with family_api() as api:
        monkeypatch.setenv("TRAINSTACK_CLOUDQUOTAS_ENDPOINT", api.url)
        decision = choose_zone(dev_config(*H100), "fr", compute=ComputeQuotas("p1", api.url))
    assert (decision.zone, decision.metric, decision.needed, decision.reported) == (
        "europe-west4-a",
        "PREEMPTIBLE_GPUS_PER_GPU_FAMILY",
        8,
        True,
    )
    row = decision.rows[1]
    assert (row.limit, row.ok) == (16, True) and "gpu_family=NVIDIA_H100" in row.note
    assert quota_id(decision.metric) == "PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region"
    assert len(api.requests("GET", SPOT_FAMILY)) == 1


def test_an_h100_family_quota_too_small_is_refused_naming_it(project, monkeypatch):
    with family_api(spot_h100_limit="4") as api:
        monkeypatch.setenv("TRAINSTACK_CLOUDQUOTAS_ENDPOINT", api.url)
        with pytest.raises(QuotaError) as caught:
            choose_zone(dev_config(*H100), "fr", compute=ComputeQuotas("p1", api.url))
    err = caught.value
    # europe-west4: 4 Spot H100 granted; europe-west1: no Spot H100 (0), and its on-demand default is empty (0)
    assert [(r.zone, r.metric, r.limit, r.ok) for r in err.rows[1:]] == [
        ("europe-west4-a", "PREEMPTIBLE_GPUS_PER_GPU_FAMILY", 4, False),
        ("europe-west4-b", "PREEMPTIBLE_GPUS_PER_GPU_FAMILY", 4, False),
        ("europe-west4-c", "PREEMPTIBLE_GPUS_PER_GPU_FAMILY", 4, False),
        ("europe-west1-b", "GPUS_PER_GPU_FAMILY", 0, False),
        ("europe-west1-c", "GPUS_PER_GPU_FAMILY", 0, False),
    ]
    assert (
        "--quota-id=PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region "
        "--dimensions=region=europe-west4,gpu_family=NVIDIA_H100 --preferred-value=8"
    ) in err.hint
    assert (
        "--quota-id=GPUS-PER-GPU-FAMILY-per-project-region --dimensions=region=europe-west1,gpu_family=NVIDIA_H100"
    ) in err.hint


def test_without_a_decision_an_h100_guard_reads_the_family_quotas(project):
    # No per-GPU H100 quota exists in Cloud Quotas to read (the plan's data source would fail on it).
    from stacks.targets.gcp.target import gcp_placement

    assert gcp_placement(dev_config(*H100), "fr").quota_metrics == [
        "PREEMPTIBLE_GPUS_PER_GPU_FAMILY",
        "GPUS_PER_GPU_FAMILY",
    ]
    assert gcp_placement(dev_config(*H100, "defaults.spot=false"), "fr").quota_metrics == ["GPUS_PER_GPU_FAMILY"]
    assert gcp_placement(dev_config(), "fr").quota_metrics == ["PREEMPTIBLE_NVIDIA_L4_GPUS", "NVIDIA_L4_GPUS"]


def test_a_preempted_runs_own_gpus_count_as_free_for_its_move(project, monkeypatch):
    """Its VM still stopping holds the region's one Spot L4: a move that deletes its group first may take another
    zone of the region; a new run's look (not freed) may not."""
    from stacks.targets.gcp.target import GcpTarget, gcp_placement

    ew4 = with_quotas(fixture("region_europe-west4.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=(1, 1))
    no_l4 = with_quotas(fixture("region_europe-west1.json"), NVIDIA_L4_GPUS=(0, 0), PREEMPTIBLE_NVIDIA_L4_GPUS=(0, 0))
    config = dev_config("gcp.fallback_zones=[europe-west1-b]")
    first = gcp_placement(config, "fr", zone="europe-west4-b", metric="PREEMPTIBLE_NVIDIA_L4_GPUS")
    with compute_api(ew4=ew4, ew1=no_l4) as api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        held = GcpTarget().placements(config, "fr", None, first=first)
        freed = GcpTarget().placements(config, "fr", None, first=first, freed=True)
    assert [p.zone for p in held] == ["europe-west4-b"]
    assert [p.zone for p in freed] == ["europe-west4-b", "europe-west4-a", "europe-west4-c"]
