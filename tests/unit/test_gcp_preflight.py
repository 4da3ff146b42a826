"""`trainctl train` on a gcp env stops at preflight, before any synth or apply, when it cannot run.

Real clients all the way: GCS through gcp-storage-emulator, Compute and the registry
through recorded responses on 127.0.0.1.
"""

from __future__ import annotations

from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.targets.gcp.image import REGISTRY_ENDPOINT_ENV
from stacks.targets.gcp.quota import ENDPOINT_ENV
from tests.support.compute_api import PROJECT, compute_api, fixture, with_quotas
from tests.support.project import SAMPLE

runner = CliRunner()
MANIFEST = "/v2/p1/trainstack/trainer/manifests/[^/]+"


def dev(bucket: str) -> list[str]:
    return ["--env", "dev", "--set", "gcp.project=p1", "--set", f"bucket={bucket}"]


def train_against(api, args, monkeypatch, *langs: str):
    """`trainctl train fr` (or LANGS) with Compute and the registry served by `api` -> (result, flattened output)."""
    with api:
        monkeypatch.setenv(ENDPOINT_ENV, api.url)
        monkeypatch.setenv(REGISTRY_ENDPOINT_ENV, api.url)
        result = runner.invoke(app, ["train", *(langs or ["fr"]), *args])
    return result, " ".join(result.output.split())


def test_image_never_built_is_exit_3_before_anything_is_created(project, gcs_env, monkeypatch):
    args = dev("gs://test-bucket/preflight-image")
    pushed = runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr"), *args])
    assert pushed.exit_code == 0, pushed.output
    api = compute_api()
    api.routes[("HEAD", MANIFEST)] = (404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})
    result, out = train_against(api, args, monkeypatch)
    assert result.exit_code == 3, result.output
    assert "quota ok: fr runs in europe-west4-a (PREEMPTIBLE_NVIDIA_L4_GPUS)" in out
    assert "trainctl image build --env dev" in out
    # The cost estimate comes first, before anything is created (per hour and at max_run_hours=4).
    estimate = "estimated cost of 1 x g2-standard-8 (Spot, europe-west4): $"
    assert estimate in out and "at max_run_hours=4" in out and out.index(estimate) < out.index("quota ok")
    assert len(api.requests("HEAD", MANIFEST)) == 1
    assert not (project / ".trainstack" / "dev" / "cdktf.out").exists()  # nothing synthesized or applied


def test_no_quota_is_exit_3_with_the_table_and_no_image_lookup(project, gcs_env, monkeypatch):
    args = dev("gs://test-bucket/preflight-quota")
    assert runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr"), *args]).exit_code == 0
    api = compute_api(project=with_quotas(fixture("project_p1.json"), GPUS_ALL_REGIONS=(4, 4)))
    result, _ = train_against(api, args, monkeypatch)
    assert result.exit_code == 3, result.output
    assert "GPUS_ALL_REGIONS" in result.output
    assert api.requests("GET", PROJECT) and not api.requests("HEAD", MANIFEST)
    assert not (project / ".trainstack" / "dev" / "cdktf.out").exists()


def test_run_metadata_records_the_image_zone_and_quota_metric(project, tmp_path):
    import json
    from types import SimpleNamespace

    from stacks.project import Project
    from stacks.runs.language_run import resolve
    from stacks.runs.stack_ops import write_run_metadata
    from stacks.targets.gcp.placement import GcpPlacement
    from trainer.storage import LocalBucket

    proj = Project(project)
    config = proj.load("dev", ["gcp.project=p1"])
    stack_dir = proj.work_outdir("dev") / "stacks" / "train-fr"
    stack_dir.mkdir(parents=True)
    (stack_dir / "cdk.tf.json").write_text("{}")
    placement = GcpPlacement(
        zone="europe-west4-b",
        image="europe-west4-docker.pkg.dev/p1/trainstack/trainer:abc123",
        quota_metrics=["NVIDIA_L4_GPUS"],
        startup_script="",
        shutdown_script="",
    )
    bucket = LocalBucket(tmp_path / "bucket")
    run = resolve(proj, config, "fr", bucket=bucket)
    run.tf, run.placement, run.run_id = SimpleNamespace(binary="terraform"), placement, "20261122-101500-ab12"
    write_run_metadata(run)
    meta = json.loads(bucket.read_bytes("fr/runs/20261122-101500-ab12/metadata/trainctl.json"))
    assert meta["image"] == placement.image and meta["zone"] == "europe-west4-b"
    assert meta["quota_metric"] == "NVIDIA_L4_GPUS" and meta["stack"] == "train-fr"
    assert meta["machine_type"] == "g2-standard-8" and meta["gpu"] == {"type": "nvidia-l4", "count": 1}
    assert meta["spot"] is True and meta["region"] == "europe-west4"
    assert meta["cost_estimate"]["per_hour"] > 0 and meta["cost_estimate"]["max_run_hours"] == 4


def test_a_boot_image_that_does_not_resolve_is_exit_3_before_anything_is_created(project, gcs_env, monkeypatch):
    """The cheap subset of `trainctl doctor` runs before apply: the boot image family is looked up."""
    args = dev("gs://test-bucket/preflight-boot")
    assert runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr"), *args]).exit_code == 0
    api = compute_api()
    api.routes[("HEAD", MANIFEST)] = (200, {})
    result, out = train_against(api, args, monkeypatch)
    assert result.exit_code == 3, result.output
    assert "image ok" in out and "cos-stable does not resolve" in out and "describe-from-family" in out
    assert api.requests("GET", "/compute/v1/projects/cos-cloud/global/images/family/cos-stable")
    assert not (project / ".trainstack" / "dev" / "cdktf.out").exists()


def fr_and_en_beside_two_free_gpus(folder: str, nodes: int):
    """Both languages' data pushed; europe-west4 has 2 Spot L4 free, the recorded europe-west1 4 -> (args, api)."""
    args = [
        *dev(f"gs://test-bucket/{folder}"),
        "--set",
        f"defaults.nodes={nodes}",
        "--set",
        "gcp.fallback_zones=[europe-west1-b, europe-west1-c]",
    ]
    for lang in ("fr", "en"):
        assert runner.invoke(app, ["data", "push", lang, str(SAMPLE / lang), *args]).exit_code == 0
    ew4 = with_quotas(fixture("region_europe-west4.json"), PREEMPTIBLE_NVIDIA_L4_GPUS=(8, 6))
    return args, compute_api(ew4=ew4)


def test_several_languages_that_do_not_fit_together_stop_before_anything(project, gcs_env, monkeypatch):
    # three nodes each: fr fits (europe-west1), en beside it does not
    args, api = fr_and_en_beside_two_free_gpus("preflight-many", nodes=3)
    result, out = train_against(api, args, monkeypatch, "fr", "en")
    assert result.exit_code == 3, result.output
    assert "en would not fit beside fr; nothing was applied" in out and "--parallel 1" in out
    assert not api.requests("HEAD", MANIFEST)  # refused before any per-language preflight
    assert not (project / ".trainstack" / "dev" / "cdktf.out").exists()


def test_several_languages_are_placed_where_their_sum_fits(project, gcs_env, monkeypatch):
    args, api = fr_and_en_beside_two_free_gpus("preflight-placed", nodes=2)
    api.routes[("HEAD", MANIFEST)] = (404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})  # then each stops alone
    result, out = train_against(api, args, monkeypatch, "fr", "en")
    assert result.exit_code == 3, result.output
    # alone, en would also take europe-west4's two free GPUs; beside fr it goes to europe-west1
    assert "[fr] quota ok: fr runs in europe-west4-a (PREEMPTIBLE_NVIDIA_L4_GPUS) (checked with the languages" in out
    assert "[en] quota ok: en runs in europe-west1-b (PREEMPTIBLE_NVIDIA_L4_GPUS) (checked with the languages" in out
    assert out.count("trainctl image build --env dev") >= 2  # each language's own error


def test_a_bucket_that_does_not_exist_is_exit_2_before_anything_is_created(project, gcs_env, monkeypatch):
    result, out = train_against(compute_api(), dev("gs://no-such-bucket-29/runs"), monkeypatch)
    assert result.exit_code == 2, result.output
    assert "no such bucket gs://no-such-bucket-29" in out and "envs/ENV.yaml or --set bucket=" in out
    assert "no train.csv" not in out
    assert not (project / ".trainstack" / "dev" / "cdktf.out").exists()


def test_no_permission_on_the_bucket_is_exit_2_naming_the_role(project, gcs_env, gcs_proxy, monkeypatch):
    args = dev("gs://test-bucket/preflight-403")
    assert runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr"), *args]).exit_code == 0
    gcs_proxy.add("status", r"^GET /storage/v1/b/test-bucket/o\?", status=403, times=100)
    result, out = train_against(compute_api(), args, monkeypatch)
    assert result.exit_code == 2, result.output
    assert "permission denied (403" in out and "roles/storage.objectAdmin on gs://test-bucket" in out
    assert gcs_proxy.faults[0].hits == 1  # a permanent answer is not retried
    assert not (project / ".trainstack" / "dev" / "cdktf.out").exists()
