"""`trainctl synth --env dev`: foundation + one train-<lang> stack per language, as Terraform JSON.

The google provider cannot be downloaded here, so every property is asserted on
the synthesized JSON (and checked by checkov in test_policy.py).
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.targets.gcp.target import VM_SCRIPTS
from tests.support.project import REPO, make_project

runner = CliRunner()


def resources(doc: dict, kind: str) -> list[dict]:
    return list(doc.get("resource", {}).get(kind, {}).values())


def test_one_foundation_and_one_train_stack_per_language(synthesized):
    _, stacks, _ = synthesized
    assert sorted(stacks) == ["foundation", "train-en", "train-fr"]


def test_synth_is_byte_identical(synthesized):
    root, _, _ = synthesized
    for name in ("foundation", "train-fr", "train-en"):
        a = (root / "out1" / "stacks" / name / "cdk.tf.json").read_bytes()
        b = (root / "out2" / "stacks" / name / "cdk.tf.json").read_bytes()
        assert a == b, name


def test_a_synth_loads_the_provider_modules_it_uses_not_all_1470(synthesized):
    from stacks.targets.gcp.cdk_google import GOOGLE_PACKAGE

    loaded = [name for name in sys.modules if name.startswith(GOOGLE_PACKAGE + ".")]
    assert f"{GOOGLE_PACKAGE}.compute_instance_template" in loaded and len(loaded) < 45, len(
        loaded
    )  # 21 resources, each with its _private


def test_state_lives_in_gcs_one_prefix_per_env_and_stack(synthesized):
    _, stacks, _ = synthesized
    for name, doc in stacks.items():
        assert doc["terraform"]["backend"]["gcs"] == {"bucket": "p1-trainstack-tfstate", "prefix": f"dev/{name}"}


def test_no_primitive_roles_anywhere(synthesized):
    _, stacks, _ = synthesized
    text = json.dumps(stacks)
    for role in ("roles/owner", "roles/editor", "roles/viewer"):
        assert f'"{role}"' not in text


def test_foundation_bucket_registry_and_services(synthesized):
    _, stacks, _ = synthesized
    doc = stacks["foundation"]
    bucket = next(b for b in resources(doc, "google_storage_bucket") if b["name"] == "trainstack-dev-artifacts")
    assert bucket["uniform_bucket_level_access"] and bucket["public_access_prevention"] == "enforced"
    assert bucket["versioning"] == {"enabled": True}
    services = {s["service"] for s in resources(doc, "google_project_service")}
    assert {"compute.googleapis.com", "cloudquotas.googleapis.com", "sts.googleapis.com"} <= services
    assert resources(doc, "google_artifact_registry_repository")[0]["repository_id"] == "trainstack"
    provider = resources(doc, "google_iam_workload_identity_pool_provider")[0]
    assert provider["attribute_condition"].startswith(
        'assertion.repository_id == "101" && assertion.repository_owner_id == "202" && '
    )


def test_train_stack_runs_the_content_hash_image_on_spot_l4_in_the_first_zone(synthesized):
    _, stacks, _ = synthesized
    doc = stacks["train-fr"]
    template = resources(doc, "google_compute_instance_template")[0]
    meta = template["metadata"]
    assert re.fullmatch(
        r"europe-west4-docker\.pkg\.dev/p1/trainstack/trainer:[0-9a-f]{12,64}", meta["trainstack-image"]
    )
    assert doc["output"]["image"]["value"] == meta["trainstack-image"]
    for key, script in (("startup-script", "startup.sh"), ("shutdown-script", "shutdown.sh")):
        text = (VM_SCRIPTS / script).read_text()
        assert "${" in text  # the shell's own ${VAR:-default}: Terraform must not read it as an interpolation
        assert meta[key] == text.replace("${", "$${").replace("%{", "%%{")
    assert meta["enable-oslogin"] == "TRUE" and meta["block-project-ssh-keys"] == "TRUE"
    args = json.loads(meta["trainstack-args"])
    assert args[:8] == [
        "--lang",
        "fr",
        "--lang-code",
        "fr",
        "--bucket",
        "gs://trainstack-dev-artifacts",
        "--env",
        "dev",
    ]
    assert "--run-id" not in args and meta["trainstack-run-id"].startswith("${terraform_data.")
    assert template["labels"]["lang"] == "fr" and template["labels"]["run"] == meta["trainstack-run-id"]
    assert template["machine_type"] == "g2-standard-8"
    assert template["scheduling"]["provisioning_model"] == "SPOT"
    assert template["service_account"]["email"] == "trainstack-trainer@p1.iam.gserviceaccount.com"
    mig = resources(doc, "google_compute_instance_group_manager")[0]
    assert mig["zone"] == "europe-west4-a" and mig["name"] == "dev-train-fr" == meta["trainstack-mig"]
    assert mig["target_size"] == 1 and mig["wait_for_instances"] is False
    # No preflight decision (plain synth): the guard accepts Spot or on-demand quota, like the preflight.
    assert sorted(i["quota_id"] for i in doc["data"]["google_cloud_quotas_quota_info"].values()) == [
        "NVIDIA-L4-GPUS-per-project-region",
        "PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region",
    ]


def test_multi_node_standard_language(synthesized):
    _, stacks, _ = synthesized
    doc = stacks["train-en"]
    template = resources(doc, "google_compute_instance_template")[0]
    assert template["guest_accelerator"] == [{"type": "nvidia-l4", "count": 2}]
    assert template["scheduling"]["provisioning_model"] == "STANDARD"
    assert template["metadata"]["trainstack-nodes"] == "2"
    assert template["metadata"]["trainstack-max-restarts"] == "3"
    assert template["metadata"]["trainstack-max-restarts-on-errors"] == "2"
    assert template["metadata"]["trainstack-restart-on-exit-codes"] == "75,137"
    assert sorted(c["name"] for c in resources(doc, "google_compute_per_instance_config")) == [
        "dev-train-en-0",
        "dev-train-en-1",
    ]
    assert resources(doc, "google_compute_resource_policy")[0]["group_placement_policy"] == {
        "collocation": "COLLOCATED"
    }
    infos = doc["data"]["google_cloud_quotas_quota_info"].values()
    assert [i["quota_id"] for i in infos] == ["NVIDIA-L4-GPUS-per-project-region"]  # not Spot: on-demand only


def test_every_stack_bills_provider_calls_to_its_project(synthesized):
    # Issue 38: with user credentials the provider ignored the quota project and Cloud Quotas refused the
    # quota guard's data source at plan time (terraform-provider-google #18337: the maintainers' fix).
    _, stacks, _ = synthesized
    for name, doc in stacks.items():
        (provider,) = doc["provider"]["google"]
        assert provider["user_project_override"] is True and provider["billing_project"] == "p1", name
    members = resources(stacks["foundation"], "google_project_iam_member")
    for account in ("ci_planner", "ci_deployer"):
        assert any(
            m["role"] == "roles/serviceusage.serviceUsageConsumer"
            and f"google_service_account.{account}" in m["member"]
            for m in members
        ), account


def test_vms_log_to_cloud_logging_and_carry_the_tag_the_foundation_firewall_lets_meet(synthesized):
    # Issue 38: COS sends nothing to Cloud Logging unless asked; on a custom VPC nodes could not meet.
    _, stacks, _ = synthesized
    (rule,) = resources(stacks["foundation"], "google_compute_firewall")
    assert rule["direction"] == "INGRESS" and rule["network"] == "default"
    assert sorted(a["protocol"] for a in rule["allow"]) == ["tcp", "udp"] and all(
        "ports" not in a for a in rule["allow"]
    )
    assert rule["source_tags"] == rule["target_tags"] == ["trainstack-dev-trainer"]
    assert "source_ranges" not in rule
    for lang in ("fr", "en"):
        template = resources(stacks[f"train-{lang}"], "google_compute_instance_template")[0]
        assert template["metadata"]["google-logging-enabled"] == "true"
        assert template["tags"] == rule["target_tags"]


@pytest.mark.parametrize(
    "sets, message",
    [
        ([], "sets no `gcp.project`"),
        (["gcp.project=p1", "defaults.gcp.gpu.type=nvidia-h900"], "unknown GPU type 'nvidia-h900'"),
        (
            ["gcp.project=p1", "languages.fr.gcp.gpu.type=nvidia-tesla-a100"],
            "attaches only to a2-highgpu-* or a2-megagpu-*",
        ),
        (["gcp.project=p1", "languages.fr.nodes=0"], "languages.fr.nodes"),
        (
            ["gcp.project=p1", "gcp.zones=[europe-west4-a,us-central1-a]"],
            "zone 'us-central1-a' is not in region 'europe-west4'",
        ),
        (
            ["gcp.project=p1", "languages.fr.local.processes=2"],
            "languages.fr.local: settings of target local, but the env's target is gcp",
        ),
    ],
)
def test_bad_gcp_config_is_exit_2(project, sets, message):
    result = runner.invoke(app, ["synth", "--env", "dev", *[a for s in sets for a in ("--set", s)]])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_cdktf_app_without_ci_settings_leaves_the_foundation_out_and_maps_errors(tmp_path):
    """`cdktf deploy train-fr` works on a gcp env whose CI trust is not set up; the foundation never
    synthesizes with a default repository, and a config error is one line with exit 2."""
    import subprocess
    import sys

    root = make_project(tmp_path / "proj")
    dev = root / "envs" / "dev.yaml"
    dev.write_text(dev.read_text().replace("gcp:\n", "gcp:\n  project: p1\n", 1))
    env = {**os.environ, "TRAINCTL_ENV": "dev"}
    done = subprocess.run(
        [sys.executable, "-m", "stacks.app"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "stack foundation left out: set ci.github_repository" in done.stderr
    assert sorted(p.name for p in (root / "cdktf.out" / "stacks").iterdir()) == ["train-en", "train-fr"]
    dev.write_text(dev.read_text() + "defaults: {nodes: 0}\n")
    done = subprocess.run(
        [sys.executable, "-m", "stacks.app"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.startswith("error: ")


def test_vm_metadata_round_trips_through_synth(synthesized):
    """What the stack writes is what the VM reads: VmSpec from the synthesized template's metadata."""
    from trainer.launchers.restarts import RestartPolicy
    from trainer.launchers.vm.metadata import MetadataClient
    from trainer.launchers.vm.spec import VmSpec

    _, stacks, _ = synthesized
    for lang, nodes in (("fr", 1), ("en", 2)):
        written = resources(stacks[f"train-{lang}"], "google_compute_instance_template")[0]["metadata"]

        class SynthesizedMetadata(MetadataClient):  # the metadata server, answering from the template
            def get(self, path: str) -> str | None:
                return written.get(path.removeprefix("instance/attributes/"))  # noqa: B023 (read in this pass)

        spec = VmSpec.from_metadata(SynthesizedMetadata(root="http://unused/"))
        assert (spec.lang, spec.env, spec.nodes, spec.project, spec.mig) == (
            lang,
            "dev",
            nodes,
            "p1",
            f"dev-train-{lang}",
        )
        assert spec.args[:2] == ["--lang", lang] and spec.image and spec.docker_flags == ()
        assert spec.restart_policy == RestartPolicy(*((2, (75, 137)) if lang == "en" else (0, ())))
        assert (
            spec.kept_bucket == "gs://p1-kept/trainstack"
        )  # where a kept work folder goes (trainer.launchers.vm.kept)
        assert spec.to_metadata() == {k: v for k, v in written.items() if k.startswith("trainstack-")}
    # startup.sh reads only attributes the stack writes
    read = set(re.findall(r"\bmd (trainstack-[a-z-]+)", (REPO / "images/trainer/startup.sh").read_text()))
    assert read and read <= set(spec.to_metadata()) | {"trainstack-gpu-driver"}


def test_terraform_parses_the_vm_metadata_of_the_train_stack(synthesized, tmp_path):
    """Every metadata value but the run id's reference, as a terraform_data input: `terraform validate` reads
    each string as Terraform reads the stack (a template), so an unescaped shell `${VAR:-x}` fails here."""
    import shutil
    import subprocess

    if shutil.which("terraform") is None:
        pytest.skip("terraform is not installed")
    _, stacks, _ = synthesized
    meta = resources(stacks["train-fr"], "google_compute_instance_template")[0]["metadata"]
    inputs = {k: v for k, v in meta.items() if not v.startswith("${terraform_data.")}
    assert {"startup-script", "shutdown-script"} <= set(inputs)
    (tmp_path / "main.tf.json").write_text(json.dumps({"resource": {"terraform_data": {"meta": {"input": inputs}}}}))
    env = {**os.environ, "TF_IN_AUTOMATION": "1"}
    for step in (["init", "-input=false", "-backend=false"], ["validate", "-no-color"]):
        done = subprocess.run(["terraform", *step], cwd=tmp_path, capture_output=True, text=True, env=env)
        assert done.returncode == 0, (done.stdout + done.stderr)[-1500:]
