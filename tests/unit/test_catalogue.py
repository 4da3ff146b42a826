"""The GPU catalogue is one data file (catalogue.yaml) with its sources, read and checked in one place:
every GPU type states every field, a malformed entry is refused naming the entry and the field, and the
modules that decide with it (gpus, pricing, prices) agree on the same rows."""

from __future__ import annotations

import copy

import pytest
import yaml

from stacks.errors import ConfigError, ExitStatus
from stacks.targets.gcp import catalogue, gpus, pricing
from stacks.targets.gcp.prices import PRICES_FILE, PriceTable


def document() -> dict:
    return yaml.safe_load(catalogue.CATALOGUE_FILE.read_text())


def test_the_file_loads_and_every_gpu_type_states_every_field():
    doc = document()
    wanted, wanted_sources = set(catalogue.GpuEntry.model_fields), set(catalogue.GpuSources.model_fields)
    for name, entry in doc["gpus"].items():
        # written out, null included: a field left out would read as "no family quota", "no SKU"...
        assert set(entry) == wanted, (name, wanted ^ set(entry))
        assert set(entry["sources"]) == wanted_sources, name
    built = catalogue.build(doc)
    assert built.gpu_types == gpus.GPU_TYPES and set(built.gpu_types) == set(doc["gpus"])
    for gpu in built.gpu_types.values():
        assert gpu.metric and gpu.spot_metric == f"PREEMPTIBLE_{gpu.metric}" and gpu.sku and gpu.counts
        for family in gpu.families:  # every GPU boots an image of its series and is priced by its own SKUs
            assert gpus.series_of(f"{family}8g").default_image.startswith("projects/cos-cloud/"), family
        assert f"gpu/{gpu.name}" in dict(pricing.PATTERNS)
    for source in built.sources.values():
        assert source.url.startswith("https://") and source.read_on.startswith("2026-")


@pytest.mark.parametrize(
    "description, usage, key",
    [
        ("H200 141GB GPU running in Netherlands", "OnDemand", "gpu/nvidia-h200-141gb"),
        ("H200 141GB GPU attached to Spot Preemptible VMs running in Iowa", "Preemptible", "gpu/nvidia-h200-141gb"),
        ("Commitment v1: H200 141GB GPU running in Americas for 3 Years", "Commit3Yr", None),
        ("Reserved H200 141GB GPU in Iowa", "OnDemand", None),
    ],
)
def test_the_h200_has_its_sku_wording_like_every_other_gpu(description, usage, key):
    # The H200 was in the GPU table and the boot-image series but had no SKU wording: the catalog could
    # never price it, even once A3 Ultra's core and RAM wording is known.
    sku = {
        "description": description,
        "category": {"resourceFamily": "Compute", "resourceGroup": "GPU", "usageType": usage},
    }
    assert pricing.sku_key(sku) == key


def test_one_series_of_gives_the_boot_images_and_the_billing_words():
    assert pricing.series_of is gpus.series_of
    a3 = gpus.series_of("a3-highgpu-1g")
    assert a3.default_image == gpus.COS_121_LTS_IMAGE and a3.billed_as("a3-highgpu-1g") == "a3-highgpu"
    assert gpus.series_of("a3-ultragpu-8g") is a3 and a3.billed_as("a3-ultragpu-8g") is None  # no wording yet
    assert a3.billed_as("a3-megagpu-8g") is None and a3.billed_as("a3-edgegpu-8g") is None
    assert gpus.series_of("g2-standard-8").billed_as("g2-standard-8") == "g2"
    assert gpus.series_of("a2-ultragpu-1g").billed_as("a2-ultragpu-1g") == "a2"
    assert gpus.series_of("x9-unknown-1") is None


def _mutated(change) -> dict:
    doc = copy.deepcopy(document())
    change(doc)
    return doc


def _set(path: str, value):
    def change(doc):
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return change


_DELETE = object()


@pytest.mark.parametrize(
    "path, value, words",
    [
        ("gpus.nvidia-l4.compute_capability", _DELETE, "gpus.nvidia-l4.compute_capability: Field required"),
        ("gpus.nvidia-tesla-t4.gpu_family", _DELETE, "gpus.nvidia-tesla-t4.gpu_family: Field required"),
        ("gpus.nvidia-h200-141gb.sources.sku", _DELETE, "gpus.nvidia-h200-141gb.sources.sku: Field required"),
        ("gpus.nvidia-l4.counts", "four", "gpus.nvidia-l4.counts: Input should be a valid list"),
        ("gpus.nvidia-l4.colour", "green", "gpus.nvidia-l4.colour: Extra inputs are not permitted"),
        ("gpus.nvidia-l4.counts", [2, 1], "gpus.nvidia-l4.counts: [2, 1] must be distinct counts"),
        ("gpus.nvidia-l4.machine_families", ["z9-"], "gpus.nvidia-l4.machine_families: 'z9-' is not"),
        (
            "gpus.nvidia-h200-141gb.sources.sku",
            "a-blog",
            "gpus.nvidia-h200-141gb.sources.sku: source 'a-blog' is not listed under `sources`",
        ),
        ("series.a3.boot_image", "cos-beta", "series.a3.boot_image: 'cos-beta' is not an image under images.families"),
        ("series.g2.machine_limits.0.pattern", "g2-standard-(", "series.g2.machine_limits.0.pattern: not a regular"),
        ("series.g2.sources.gpus_per_machine", _DELETE, "series.g2.sources.gpus_per_machine: missing"),
        ("sources.cuda-gpus.read_on", "last week", "sources.cuda-gpus.read_on: String should match pattern"),
        (
            "sources.unused-page",
            {"url": "https://example.com", "read_on": "2026-11-27"},
            "sources.unused-page: cited by nothing",
        ),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_entry_and_the_field(path, value, words):
    with pytest.raises(catalogue.CatalogueError) as caught:
        catalogue.build(_mutated(_set(path, value)))
    message = caught.value.message
    assert message.startswith("invalid GPU catalogue stacks/targets/gcp/catalogue.yaml:") and words in message
    assert isinstance(caught.value, ConfigError) and caught.value.exit_status == ExitStatus.BAD_INPUT


def test_every_fault_of_a_file_is_named_at_once(tmp_path):
    bad = _mutated(lambda doc: (_set("gpus.nvidia-l4.sku", _DELETE)(doc), _set("series.n1.min_driver", "new")(doc)))
    path = tmp_path / "catalogue.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(catalogue.CatalogueError) as caught:
        catalogue.load(path)
    message = caught.value.message
    assert str(path) in message and "gpus.nvidia-l4.sku: Field required" in message
    assert "series.n1.min_driver:" in message
    path.write_text("gpus: [unclosed\n")
    with pytest.raises(catalogue.CatalogueError, match="not YAML"):
        catalogue.load(path)


def test_a_series_no_gpu_attaches_to_is_refused():
    extra = copy.deepcopy(document()["series"]["n1"])
    with pytest.raises(catalogue.CatalogueError, match="series.n2: no GPU under `gpus` attaches to it"):
        catalogue.build(_mutated(_set("series.n2", extra)))


def test_the_fallback_prices_only_machine_types_of_catalogued_series():
    bad = yaml.safe_load(PRICES_FILE.read_text())
    bad["regions"]["us-central1"]["z9-standard-8"] = {"on_demand": 1.0, "spot": 0.5, "source": "cyc-2026-07-30"}
    with pytest.raises(ValueError, match=r"machine types of no series in catalogue.yaml: \['z9-standard-8'\]"):
        PriceTable.model_validate(bad)
