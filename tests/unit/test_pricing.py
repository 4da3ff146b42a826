"""Cost estimates from the Cloud Billing Catalog (recorded responses served to the real reader),
cached in the bucket for a day, and the dated fallback table when the catalog cannot be read."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from stacks.project import Project
from stacks.targets.gcp import pricing
from stacks.targets.gcp.prices import PRICES_FILE, PriceTable, estimate, fallback_book
from stacks.targets.gcp.quota import ENDPOINT_ENV as COMPUTE_ENDPOINT_ENV
from tests.support.recorded_api import FIXTURES, RecordedApi
from trainer.storage import LocalBucket

SKUS = "/v1/services/6F81-5844-456A/skus"
MACHINE = "/compute/v1/projects/p1/zones/[^/]+/machineTypes/{}"


def page(n: int) -> list[dict]:
    return json.loads((FIXTURES / "billing" / f"skus_page{n}.json").read_text())["skus"]


def catalog_api(**extra) -> RecordedApi:
    return RecordedApi(
        {
            ("GET", SKUS, (("pageToken", "Cg5wYWdlLTI"),)): (200, "billing/skus_page2.json"),
            ("GET", SKUS): (200, "billing/skus_page1.json"),
            ("GET", MACHINE.format("g2-standard-8")): (200, "compute/machine_type_g2-standard-8.json"),
            ("GET", MACHINE.format("a2-highgpu-1g")): (200, "compute/machine_type_a2-highgpu-1g.json"),
            **extra,
        }
    )


@pytest.fixture
def dev(project):
    return Project(project).load("dev", ["gcp.project=p1", "gcp.zones=[europe-west4-a]"])


def test_rates_keep_one_sku_per_key_and_never_a_lookalike():
    rates = pricing.rates_from_skus(page(1) + page(2))
    iowa = rates["us-central1"]
    assert iowa["OnDemand"]["core/g2"] == {"usd": 0.024988, "sku": "D18E-3563-415F"}  # not Custom, not Commit
    assert iowa["OnDemand"]["gpu/nvidia-l4"] == {"usd": 0.56004, "sku": "A88A-5A60-E821"}  # not Reserved, not DWS
    assert iowa["Preemptible"]["gpu/nvidia-l4"]["sku"] == "AEC2-3D5C-61BF"  # "attached to Spot Preemptible VMs"
    assert iowa["Preemptible"]["core/g2"]["usd"] == 0.01405
    # multi-regional SKUs price every region they list; the A100 and the A100 80GB stay apart
    assert rates["us-east1"]["OnDemand"]["gpu/nvidia-tesla-a100"]["usd"] == 2.933908
    assert rates["us-west1"]["OnDemand"]["gpu/nvidia-a100-80gb"]["usd"] == 3.92729
    assert iowa["OnDemand"]["gpu/nvidia-h100-80gb"] == {"ambiguous": ["0A1B-0016-H1A", "0A1B-0017-H1B"]}
    assert not any("Storage" in str(v) for v in iowa.values())
    assert "Commit1Yr" not in iowa


@pytest.mark.parametrize(
    "desc, group, usage, key",
    [
        ("G2 Instance Core running in Iowa", "CPU", "OnDemand", "core/g2"),
        ("Spot Preemptible N1 Predefined Instance Ram running in Americas", "N1Standard", "Preemptible", "ram/n1"),
        (
            "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Warsaw",
            "GPU",
            "Preemptible",
            "gpu/nvidia-tesla-t4",
        ),
        ("Nvidia H100 80GB Mega GPU running in Virginia", "GPU", "OnDemand", "gpu/nvidia-h100-mega-80gb"),
        ("N1 Predefined Instance Core running in Americas", "N1Standard", "Commit1Yr", None),
        ("Nvidia Tesla T4 Virtual Workstation GPU running in Americas", "GPU", "OnDemand", None),
        ("A3Plus Instance Core running in Iowa", "CPU", "OnDemand", None),
    ],
)
def test_sku_descriptions_map_to_keys(desc, group, usage, key):
    sku = {"description": desc, "category": {"resourceFamily": "Compute", "resourceGroup": group, "usageType": usage}}
    assert pricing.sku_key(sku) == key


def test_catalog_prices_the_vm_pages_through_and_caches_a_day(dev, tmp_path, monkeypatch):
    bucket = LocalBucket(tmp_path / "b")
    with catalog_api() as api:
        monkeypatch.setenv(pricing.ENDPOINT_ENV, api.url)
        monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, api.url)
        book = pricing.price_book(dev, bucket, ["g2-standard-8"])
        assert [s.query.get("pageToken") for s in api.requests("GET", SKUS)] == [None, ["Cg5wYWdlLTI"]]
        assert api.requests("GET", SKUS)[0].query["pageSize"] == ["5000"]
        assert book.warning == "" and book.source.startswith("Cloud Billing Catalog API, read ")
        # 8 x core + 32 GiB x RAM + 1 x L4, each from its SKU
        assert book.vm_per_hour("us-central1", "g2-standard-8", "nvidia-l4", 1, False) == (0.8536, "")
        assert book.vm_per_hour("us-central1", "g2-standard-8", "nvidia-l4", 1, True) == (0.4799, "")
        assert book.vm_per_hour("europe-west4", "g2-standard-8", "nvidia-l4", 1, False) == (0.8972, "")
        line = estimate(dev.language("fr"), "europe-west4", book).line("g2-standard-8")
        assert "(list prices: Cloud Billing Catalog API, read " in line
        # a second look within the day reads the bucket, not the API; a new machine type asks Compute only
        again = pricing.price_book(dev, bucket, ["g2-standard-8", "a2-highgpu-1g"])
        assert len(api.requests("GET", SKUS)) == 2 and again.read_at == book.read_at
        assert again.vm_per_hour("us-central1", "a2-highgpu-1g", "nvidia-tesla-a100", 1, False) == (3.6734, "")
    cached = json.loads(bucket.read_bytes(pricing.CACHE_KEY))
    assert set(cached["shapes"]) == {"g2-standard-8", "a2-highgpu-1g"}
    assert cached["shapes"]["a2-highgpu-1g"] == {"vcpus": 12, "memory_gib": 85.0}


def test_a_flex_start_hour_is_the_on_demand_rate_less_the_published_discount_of_its_series(dev, tmp_path):
    """Neither book reads flex-start SKUs: A2/A3 at on-demand less 53 % (the page's "up to"), G2 at on-demand (no
    discount for G2); the estimate of a run at rung flex_start prices it so and says how."""
    from stacks.targets.gcp.cost import billed_vm_spans
    from stacks.targets.gcp.prices import rung_per_hour

    book = fallback_book()
    a2 = ("us-central1", "a2-highgpu-1g", "nvidia-tesla-a100", 1)
    rate, how = rung_per_hour(book, *a2, "flex_start")
    assert rate == round(3.6734 * 0.47, 4) and "53% discount" in how and "about-flex-start-vms" in how
    assert rung_per_hour(book, *a2, "spot") == (1.9280, "") and rung_per_hour(book, *a2, "on_demand") == (3.6734, "")
    assert rung_per_hour(book, "us-central1", "g2-standard-8", "nvidia-l4", 1, "flex_start")[0] == 0.8536
    settings = dev.language("fr").model_copy(update={"capacity": ["flex_start"], "spot": False})
    cost = estimate(settings, "europe-west4", book)
    assert cost.vm_per_hour == 0.8972 and cost.as_dict()["rung"] == "flex_start"
    assert "(flex-start, europe-west4)" in cost.line("g2-standard-8")
    # the run's cost: time at rung flex_start (placements.json's `rung`) apart from its Spot time
    start = datetime(2026, 11, 29, 9, tzinfo=timezone.utc)
    boots = [{"name": "vm-a", "booted_at": start.isoformat(), "zone": "europe-west4-a"}]
    boots += [{"name": "vm-b", "booted_at": (start + timedelta(hours=1)).isoformat(), "zone": "europe-west4-b"}]
    placements = [
        {
            "zone": "europe-west4-a",
            "spot": True,
            "rung": "spot",
            "applied_at": start.isoformat(),
            "ended_at": (start + timedelta(hours=1)).isoformat(),
        },
        {
            "zone": "europe-west4-b",
            "spot": False,
            "rung": "flex_start",
            "applied_at": (start + timedelta(hours=1)).isoformat(),
        },
    ]
    spans = billed_vm_spans(boots, start + timedelta(hours=3), placements)
    assert spans == {("europe-west4", "spot"): 3600.0, ("europe-west4", "flex_start"): 7200.0}


def test_catalog_says_why_it_cannot_price(dev, tmp_path, monkeypatch):
    with catalog_api() as api:
        monkeypatch.setenv(pricing.ENDPOINT_ENV, api.url)
        monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, api.url)
        book = pricing.price_book(dev, None, ["g2-standard-8", "a2-highgpu-1g"])
    vm, note = book.vm_per_hour("us-central1", "a2-highgpu-1g", "nvidia-tesla-a100", 1, True)
    assert vm is None and note == "cost unknown: the Billing Catalog has no Spot core/a2 SKU in us-central1"
    vm, note = book.vm_per_hour("us-central1", "a3-highgpu-1g", "nvidia-h100-80gb", 1, False)
    assert vm is None and "shape of a3-highgpu-1g could not be read" in note
    book.shapes["a3-highgpu-1g"] = {"vcpus": 26, "memory_gib": 234.0}
    book.rates["us-central1"]["OnDemand"].update(
        {"core/a3-highgpu": {"usd": 0.03, "sku": "x"}, "ram/a3-highgpu": {"usd": 0.004, "sku": "y"}}
    )
    vm, note = book.vm_per_hour("us-central1", "a3-highgpu-1g", "nvidia-h100-80gb", 1, False)
    assert vm is None and note.startswith("cost unknown: 2 on-demand gpu/nvidia-h100-80gb SKUs match in us-central1")
    assert book.vm_per_hour("us-central1", "z9-mystery-1", None, 0, False)[1].startswith(
        "cost unknown: no catalog wording known for machine type z9-mystery-1"
    )


def test_stale_cache_is_read_again(dev, tmp_path, monkeypatch):
    bucket = LocalBucket(tmp_path / "b")
    old = (datetime.now(timezone.utc) - timedelta(days=2)).strftime("%Y-%m-%dT%H:%MZ")
    bucket.write_bytes(pricing.CACHE_KEY, json.dumps({"read_at": old, "rates": {}, "shapes": {}}).encode())
    with catalog_api() as api:
        monkeypatch.setenv(pricing.ENDPOINT_ENV, api.url)
        monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, api.url)
        book = pricing.price_book(dev, bucket, ["g2-standard-8"])
    assert len(api.requests("GET", SKUS)) == 2 and book.read_at != old
    assert json.loads(bucket.read_bytes(pricing.CACHE_KEY))["read_at"] == book.read_at


@pytest.mark.parametrize(
    "status, words", [(403, "gcloud services enable cloudbilling.googleapis.com"), (500, "retry later")]
)
def test_unreadable_catalog_falls_back_to_the_dated_table_with_a_warning(dev, monkeypatch, status, words):
    error = {"error": {"code": status, "message": "Cloud Billing API has not been used in project p1"}}
    with RecordedApi({("GET", SKUS): (status, error)}) as api:
        monkeypatch.setenv(pricing.ENDPOINT_ENV, api.url)
        book = pricing.price_book(dev, None, ["g2-standard-8"])
    assert book.source == "fallback table of 2026-07-30 (stacks/targets/gcp/prices.yaml)"
    assert f"HTTP {status}: Cloud Billing API has not been used in project p1" in book.warning and words in book.warning
    assert book.vm_per_hour("europe-west4", "g2-standard-8", "nvidia-l4", 1, True) == (0.4708, "")


def test_the_closed_port_of_the_suite_also_falls_back(dev):
    book = pricing.price_book(dev, None, ["g2-standard-8"])
    assert book.source.startswith("fallback table") and "cannot read the Cloud Billing Catalog" in book.warning


def test_fallback_table_is_dated_and_every_figure_names_its_source():
    table = fallback_book().table
    assert table.taken == "2026-07-30" and all("Cloud Billing Catalog" in s for s in table.sources.values())
    # g2-standard-8 in europe-west4: 0.3086 machine + 0.5886 L4, as the catalog's SKUs add up
    assert table.regions["europe-west4"]["g2-standard-8"].on_demand == pytest.approx(0.3086 + 0.5886, abs=1e-4)
    bad = yaml.safe_load(PRICES_FILE.read_text())
    bad["regions"]["us-central1"]["g2-standard-8"]["source"] = "a-blog"
    with pytest.raises(ValueError, match="not listed under `sources`"):
        PriceTable.model_validate(bad)
    # attached GPUs on a machine the table prices whole: unknown, not a wrong sum
    vm, note = fallback_book().vm_per_hour("us-central1", "g2-standard-8", "nvidia-l4", 2, False)
    assert vm is None and "only with the GPUs it comes with" in note


def test_plan_stores_the_catalog_quote_its_review_renders(dev, monkeypatch, gcs_env):
    from stacks.plan_render import plan_from_document
    from stacks.plan_render.review import quote_prices
    from stacks.plan_render.summary import training_lines
    from stacks.targets.gcp.target import GCP

    doc = json.loads((FIXTURES / "plans" / "dev" / "train-fr.json").read_text())
    doc["trainstack"] = {"env": "dev", "stack": "train-fr", "target": "gcp"}
    books: dict = {}
    with catalog_api() as api:
        monkeypatch.setenv(pricing.ENDPOINT_ENV, api.url)
        monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, api.url)
        quote_prices(doc, GCP, dev, books)
        quote_prices(doc, GCP, dev, books)  # a second stack of the same command: no second catalog read
        assert len(api.requests("GET", SKUS)) == 2
    prices = doc["trainstack"]["prices"]
    assert prices["spot"] == {"vm_per_hour": 0.4708, "note": ""} and prices["on_demand"]["vm_per_hour"] == 0.8972
    rendered = json.loads(json.dumps(doc))  # as `plan --from-json` reads it back
    (line,) = training_lines([plan_from_document(rendered, env="dev", stack="train-fr", source="x")])
    assert "Spot (planned) $1.88" in line and "(list prices: Cloud Billing Catalog API, read " in line


def test_an_unreadable_catalog_is_asked_once_per_command(dev, monkeypatch):
    """The estimate before apply and the run's metadata after it share one book: no second wait."""
    with RecordedApi({("GET", SKUS): (200, ["<html>sign in</html>"])}) as api:  # a proxy's answer, say
        monkeypatch.setenv(pricing.ENDPOINT_ENV, api.url)
        first = pricing.price_book(dev, None, ["g2-standard-8"])
        again = pricing.price_book(dev, None, ["g2-standard-8"])
    assert again is first and len(api.requests("GET", SKUS)) == 1
    assert "not a SKU page" in first.warning and first.source.startswith("fallback table")
