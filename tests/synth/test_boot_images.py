"""Boot images per machine series (the GPU catalogue), Secure Boot, org-policy switches, as synthesized."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.targets.gcp.gpus import (
    COS_IMAGE,
    DLVM_IMAGE,
    G2_LIMITATIONS,
    SERIES_IMAGES,
    boot_image_problem,
    default_boot_image,
    signed_driver,
)

runner = CliRunner()
# The foundation needs the one GitHub repository it trusts; any will do here.
CI = ["ci.github_repository=acme/trainstack", "ci.github_repository_id=101", "ci.github_repository_owner_id=202"]


def test_catalogue_covers_every_series_with_a_source_and_a_date():
    assert set(SERIES_IMAGES) == {"g2", "a2", "a3", "n1"}
    for row in SERIES_IMAGES.values():
        assert row.source.startswith("https://cloud.google.com/") and row.read_on in ("2026-11-25", "2026-11-27")
        assert boot_image_problem(f"{row.series}-x", row.default_image) is None  # defaults pass their own check


def test_g2_refuses_deep_learning_vm_images_and_names_the_doc():
    problem = boot_image_problem("g2-standard-8", DLVM_IMAGE)
    assert problem and G2_LIMITATIONS in problem and COS_IMAGE in problem
    full = "https://www.googleapis.com/compute/v1/projects/deeplearning-platform-release/global/images/x"
    assert boot_image_problem("g2-standard-8", full)
    assert boot_image_problem("a2-highgpu-1g", DLVM_IMAGE) is None
    assert boot_image_problem("g2-standard-8", "projects/my-project/global/images/my-image") is None  # no claim


def test_every_series_boots_container_optimized_os_which_ships_docker():
    # Issue 38: the Deep Learning VM family on A2 had no written source for Docker; COS ships it.
    for machine in ("g2-standard-8", "a2-highgpu-1g", "n1-standard-8", "x9-unknown-1"):
        assert default_boot_image(machine) == COS_IMAGE
    assert signed_driver(COS_IMAGE) and not signed_driver(DLVM_IMAGE)


COS_121_LTS = "projects/cos-cloud/global/images/family/cos-121-lts"


@pytest.mark.parametrize(
    "machine", ["a3-highgpu-1g", "a3-highgpu-8g", "a3-megagpu-8g", "a3-edgegpu-8g", "a3-ultragpu-8g"]
)
def test_a3_machines_boot_the_cos_121_lts_family_not_cos_stable(machine):
    # COS release notes, milestone 125: known performance and functional issues on a3-highgpu; use milestone 121.
    assert default_boot_image(machine) == COS_121_LTS
    assert signed_driver(COS_121_LTS) and boot_image_problem(machine, COS_121_LTS) is None


def test_an_a3_language_synthesizes_the_cos_121_lts_family(project):
    stacks = synth(
        project,
        "languages.en.gcp.machine_type=a3-highgpu-8g",
        "languages.en.gcp.gpu.type=nvidia-h100-80gb",
        "languages.en.gcp.gpu.count=8",
    )
    fr, en = template(stacks["train-fr"]), template(stacks["train-en"])
    assert en["disk"][0]["source_image"] == COS_121_LTS and fr["disk"][0]["source_image"] == COS_IMAGE
    assert en["shielded_instance_config"]["enable_secure_boot"] is True
    assert en["metadata"]["trainstack-gpu-driver"] == "latest"  # cos-extensions installs it, as on cos-stable
    # gVNIC is required from the third machine generation on (A3), the default VirtIO-Net is kept on G2
    # (https://cloud.google.com/compute/docs/instances/create-vm-with-gvnic)
    assert [n.get("nic_type") for n in en["network_interface"]] == ["GVNIC"]
    assert [n.get("nic_type") for n in fr["network_interface"]] == [None]


def synth(project: Path, *sets: str) -> dict[str, dict]:
    args = [a for s in ("gcp.project=p1", *CI, *sets) for a in ("--set", s)]
    result = runner.invoke(app, ["synth", "--env", "dev", *args, "--outdir", "out"])
    assert result.exit_code == 0, result.output
    return {p.parent.name: json.loads(p.read_text()) for p in (project / "out" / "stacks").glob("*/cdk.tf.json")}


def template(doc: dict) -> dict:
    return next(iter(doc["resource"]["google_compute_instance_template"].values()))


def test_shipped_envs_boot_images_their_series_supports(project):
    for env in ("dev", "prod"):
        result = runner.invoke(app, ["config", "show", "--env", env, "--set", "gcp.project=p1", "--json"])
        assert result.exit_code == 0, result.output
        config = json.loads(result.output)
        for lang, settings in config["languages"].items():
            vm = settings["gcp"]
            image = vm["boot_image"] or default_boot_image(vm["machine_type"])
            assert boot_image_problem(vm["machine_type"], image) is None, (env, lang)


def test_g2_boots_cos_with_secure_boot_and_a_driver_version(project):
    stacks = synth(
        project,
        "languages.en.gcp.machine_type=a2-highgpu-1g",
        "languages.en.gcp.gpu.type=nvidia-tesla-a100",
        f"languages.en.gcp.boot_image={DLVM_IMAGE}",
    )
    fr, en = template(stacks["train-fr"]), template(stacks["train-en"])
    assert fr["disk"][0]["source_image"] == COS_IMAGE
    assert fr["shielded_instance_config"]["enable_secure_boot"] is True
    assert fr["metadata"]["trainstack-gpu-driver"] == "latest"
    assert en["disk"][0]["source_image"] == DLVM_IMAGE  # chosen by the user: their image, their driver
    assert en["shielded_instance_config"]["enable_secure_boot"] is False
    assert "trainstack-gpu-driver" not in en["metadata"]


def test_secure_boot_switch_and_pinned_driver(project):
    stacks = synth(
        project,
        "languages.en.gcp.machine_type=a2-highgpu-1g",
        "languages.en.gcp.gpu.type=nvidia-tesla-a100",
        f"languages.en.gcp.boot_image={DLVM_IMAGE}",
        "languages.en.gcp.secure_boot=true",
        "languages.fr.gcp.gpu_driver=580.95.05",
    )
    assert template(stacks["train-en"])["shielded_instance_config"]["enable_secure_boot"] is True
    assert template(stacks["train-fr"])["metadata"]["trainstack-gpu-driver"] == "580.95.05"


def test_dlvm_on_g2_is_refused_with_exit_2_naming_the_doc(project):
    sets = [a for s in ("gcp.project=p1", *CI, f"languages.fr.gcp.boot_image={DLVM_IMAGE}") for a in ("--set", s)]
    result = runner.invoke(app, ["synth", "--env", "dev", *sets])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "languages.fr: boot image" in text and "accelerator-optimized-machines#g2-limitations" in text


def test_access_log_grant_is_optional_and_the_network_configurable(project):
    stacks = synth(
        project,
        "gcp.access_log_grant=false",
        "gcp.network=projects/p1/global/networks/train",
        "gcp.subnetwork=projects/p1/regions/europe-west4/subnetworks/train-eu",
    )
    members = [g["member"] for g in stacks["foundation"]["resource"]["google_storage_bucket_iam_member"].values()]
    assert "group:cloud-storage-analytics@google.com" not in members
    nic = template(stacks["train-fr"])["network_interface"][0]
    assert nic["network"] == "projects/p1/global/networks/train"
    # multi-node runs meet through the foundation's rule on that same (custom) network
    (rule,) = stacks["foundation"]["resource"]["google_compute_firewall"].values()
    assert rule["network"] == nic["network"] and rule["target_tags"] == template(stacks["train-fr"])["tags"]
    assert nic["subnetwork"] == "projects/p1/regions/europe-west4/subnetworks/train-eu"
    assert "access_config" not in nic


@pytest.mark.parametrize("value", ["latest", "default", "580.95.05", "R580"])
def test_gpu_driver_accepts_the_documented_forms(project, value):
    result = runner.invoke(
        app, ["config", "show", "--env", "dev", "--set", "gcp.project=p1", "--set", f"defaults.gcp.gpu_driver={value}"]
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["580", "r580", "v580;rm"])
def test_gpu_driver_refuses_undocumented_forms_naming_the_documented_ones(project, value):
    result = runner.invoke(
        app, ["config", "show", "--env", "dev", "--set", "gcp.project=p1", "--set", f"defaults.gcp.gpu_driver={value}"]
    )
    assert result.exit_code == 2, result.output
    assert "R580" in result.output and "580.95.05" in result.output and "run-gpus" in result.output


@pytest.mark.parametrize(
    ("settings", "wanted"),
    [
        (
            ["gcp.machine_type=a3-ultragpu-8g", "gcp.gpu.type=nvidia-h200-141gb", "gcp.gpu.count=8"],
            "hyperdisk-balanced",
        ),
        # Issue 38: "pd-standard isn't supported on instances that use the G2 machine type".
        (["gcp.disk_type=pd-standard"], "g2-limitations"),
        (
            ["gcp.machine_type=a3-highgpu-2g", "gcp.gpu.type=nvidia-h100-80gb", "gcp.gpu.count=2", "spot=false"],
            "Spot or Flex-start",
        ),
        # Spot, but on-demand VMs after a dry Spot pass: a template the group could never create
        (
            [
                "gcp.machine_type=a3-highgpu-1g",
                "gcp.gpu.type=nvidia-h100-80gb",
                "gcp.gpu.count=1",
                "on_demand_fallback=true",
            ],
            "capacity rung on_demand cannot serve this machine: a3-highgpu-1g is offered as Spot or Flex-start only",
        ),
    ],
)
def test_machine_types_that_refuse_a_setting_stop_before_apply(project, settings, wanted):
    args = ["config", "show", "--env", "dev", "--set", "gcp.project=p1"]
    for setting in settings:
        args += ["--set", f"languages.fr.{setting}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert wanted in text and "accelerator-optimized-machines" in text


def config_show(*settings: str, simulated: bool = False):
    args = ["config", "show", "--env", "dev", "--set", "gcp.project=p1"]
    if simulated:
        args += ["--set", "gcp.simulated={}"]
    for setting in settings:
        args += ["--set", f"languages.fr.{setting}"]
    result = runner.invoke(app, args)
    return result.exit_code, " ".join(result.output.split())


N1_T4 = ["gcp.machine_type=n1-standard-8", "gcp.gpu.type=nvidia-tesla-t4", "gcp.gpu.count=1"]


def test_each_rung_of_the_ladder_must_serve_the_machine(project):
    # flex-start offers accelerator-optimized series only: N1 with a T4 is refused at that rung, named with the page
    code, text = config_show(*N1_T4, "capacity=[spot, flex_start, on_demand]", simulated=True)
    assert code == 2, text
    assert "capacity rung flex_start cannot serve this machine: flex-start does not offer N1" in text
    assert "about-flex-start-vms" in text and "drop flex_start from capacity" in text
    # the same machine on the rungs that serve it passes
    code, text = config_show(*N1_T4, "capacity=[spot, on_demand]", simulated=True)
    assert code == 0, text
    # flex_start of a one-node G2 run passes where the stack is applied by the simulated cloud
    code, text = config_show("capacity=[spot, flex_start]", simulated=True)
    assert code == 0, text
    # a multi-node run: a resize request's VMs carry no rank
    code, text = config_show("capacity=[spot, flex_start]", "nodes=2", simulated=True)
    assert code == 2 and "flex_start with nodes: 2" in text, text


def test_flex_start_on_google_needs_provider_bindings_that_write_flex_start_templates(project):
    """The pinned bindings (hashicorp/google 6.50.0) would apply a STANDARD template: refused, never faked."""
    from stacks.targets.gcp.provider_release import bindings_release

    code, text = config_show("capacity=[spot, flex_start]")
    if int((bindings_release() or "0").split(".")[0]) >= 7:
        assert code == 0, text
        return
    assert code == 2, text
    assert f"hashicorp/google {bindings_release()}" in text and "#17417" in text, text


def test_machine_limits_pass_when_the_setting_fits(project):
    args = ["config", "show", "--env", "dev", "--set", "gcp.project=p1"]
    for setting in [
        "gcp.machine_type=a3-ultragpu-8g",
        "gcp.gpu.type=nvidia-h200-141gb",
        "gcp.gpu.count=8",
        "gcp.disk_type=hyperdisk-balanced",
    ]:
        args += ["--set", f"languages.fr.{setting}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("gpu", ["nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4"])
def test_gpus_the_image_cuda_dropped_are_refused_at_config_load_with_the_source(project, gpu):
    result = runner.invoke(
        app,
        [
            "config",
            "show",
            "--env",
            "dev",
            "--set",
            "gcp.project=p1",
            "--set",
            "languages.fr.gcp.machine_type=n1-standard-8",
            "--set",
            f"languages.fr.gcp.gpu.type={gpu}",
            "--set",
            "languages.fr.gcp.gpu.count=1",
        ],
    )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"{gpu} (compute capability" in text and "cuda-toolkit-release-notes" in text and "nvidia-tesla-t4" in text


def test_a_t4_on_n1_still_passes(project):
    result = runner.invoke(
        app,
        [
            "config",
            "show",
            "--env",
            "dev",
            "--set",
            "gcp.project=p1",
            "--set",
            "languages.fr.gcp.machine_type=n1-standard-8",
            "--set",
            "languages.fr.gcp.gpu.type=nvidia-tesla-t4",
            "--set",
            "languages.fr.gcp.gpu.count=1",
        ],
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["535.230.02", "R570"])
def test_a_driver_older_than_the_image_needs_is_refused_at_config_load(project, value):
    result = runner.invoke(
        app, ["config", "show", "--env", "dev", "--set", "gcp.project=p1", "--set", f"defaults.gcp.gpu_driver={value}"]
    )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"gpu_driver {value} is older than the 580" in text and "R580" in text
