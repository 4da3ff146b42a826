"""The plan review renderer: real `terraform show -json` output, hand-written fixtures, the size budget."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from stacks.plan_render import (
    GITHUB_COMMENT_LIMIT,
    load_plan_file,
    load_plan_files,
    plan_from_document,
    render_markdown,
)
from stacks.plan_render.attributes import attribute_changes
from stacks.plan_render.redact import redact

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
SECRETS = ["s3cr3t-token-value-0042", "n3w-s3cr3t-value-0043", "hunter2-very-secret", "hunter3-very-secret"]
needs_terraform = pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform not on PATH")


def render(*names: str, **kw) -> str:
    return render_markdown([load_plan_file(FIXTURES / n) for n in names], **kw)


# --- real terraform ------------------------------------------------------------------------------


def terraform(workdir: Path, *args: str) -> str:
    env = {
        "TF_IN_AUTOMATION": "1",
        "CHECKPOINT_DISABLE": "1",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "TF_CLI_CONFIG_FILE": "/dev/null",
        "HOME": str(workdir),
    }
    proc = subprocess.run(["terraform", *args, "-no-color"], cwd=workdir, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def write_config(workdir: Path, resources: dict, secret: str = "hunter2-very-secret") -> None:
    (workdir / "main.tf.json").write_text(
        json.dumps(
            {
                "variable": {"secret": {"type": "string", "sensitive": True, "default": secret}},
                "resource": {"terraform_data": resources},
                "output": {"token": {"value": "${var.secret}", "sensitive": True}},
            }
        )
    )


def real_plan(workdir: Path) -> dict:
    terraform(workdir, "plan", "-input=false", "-out=plan.bin")
    return json.loads(terraform(workdir, "show", "-json", "plan.bin"))


@pytest.fixture(scope="module")
def real_plans(tmp_path_factory) -> dict[str, dict]:
    """Plans made by the real binary with Terraform's built-in provider only (offline)."""
    workdir = tmp_path_factory.mktemp("tf")
    initial = {
        "settings": {"input": {"epochs": 6, "script": "#!/bin/bash\necho one\necho two\n"}},
        "run": {"triggers_replace": ["run-1"], "input": "fr"},
        "recreated": {"triggers_replace": ["a"], "input": "x", "lifecycle": {"create_before_destroy": True}},
        "old": {"input": "stays until removed"},
        "secret": {"input": "${var.secret}"},
    }
    write_config(workdir, initial)
    terraform(workdir, "init", "-input=false")
    plans = {"create": real_plan(workdir)}
    terraform(workdir, "apply", "-input=false", "-auto-approve")
    plans["no-op"] = real_plan(workdir)
    changed = {
        **initial,
        "settings": {"input": {"epochs": 8, "script": "#!/bin/bash\necho one\necho 2\necho three\n"}},
        "run": {"triggers_replace": ["run-2"], "input": "fr"},
        "recreated": {**initial["recreated"], "triggers_replace": ["b"]},
    }
    del changed["old"]
    write_config(workdir, changed, secret="hunter3-very-secret")
    plans["changed"] = real_plan(workdir)
    return plans


@needs_terraform
def test_real_create_plan(real_plans):
    plan = plan_from_document(real_plans["create"], env="local", stack="train-fr", source="create")
    assert plan.count("create") == 5 and plan.has_changes
    text = render_markdown([plan])
    assert "5 to create" in text.splitlines()[2] and "[!CAUTION]" not in text


@needs_terraform
def test_real_no_change_plan_is_one_line(real_plans):
    plan = plan_from_document(real_plans["no-op"], env="local", stack="train-fr", source="no-op")
    assert not plan.has_changes and plan.count("no-op") == 5
    text = render_markdown([plan])
    assert "✅ **No changes**" in text and "No changes: `local` · `train-fr`." in text and "<details>" not in text


@needs_terraform
def test_real_update_replace_delete_plan(real_plans):
    doc = real_plans["changed"]
    plan = plan_from_document(doc, env="local", stack="train-fr", source="changed")
    assert {c.address: c.kind for c in plan.changes if c.kind != "no-op"} == {
        "terraform_data.settings": "update",
        "terraform_data.run": "replace",
        "terraform_data.recreated": "replace",
        "terraform_data.old": "delete",
        "terraform_data.secret": "update",
    }
    text = render_markdown([plan])
    head = "\n".join(text.splitlines()[:14])
    assert "**delete** `local` · `train-fr` `terraform_data.old` — its configuration was removed" in head
    assert "**replace** `local` · `train-fr` `terraform_data.run` — destroy before create" in head
    assert "`terraform_data.recreated` — create before destroy" in head and "forced by `triggers_replace`" in head
    # Attribute level: the number changed, the script is summarised (hash, line counts), never shown.
    assert "input.epochs = 6 -> 8" in text
    assert "input.script = 3 → 4 lines (+2 −1), sha256:" in text and "echo three" not in text
    assert 'triggers_replace[0] = "run-1" -> "run-2"   # forces replacement' in text
    for secret in SECRETS:
        assert secret not in text
        assert secret not in json.dumps(redact(doc))


# --- hand-written fixtures -----------------------------------------------------------------------


def test_delete_is_in_the_banner_under_the_table():
    lines = render("dev/delete.json").splitlines()
    assert lines[2].startswith("⚠️ **Destroys resources**: 1 to delete")
    table_end = max(i for i, ln in enumerate(lines) if ln.startswith("| `dev`"))
    assert lines[table_end + 2] == "> [!CAUTION]"
    assert lines[table_end + 4] == (
        "> - **delete** `dev` · `foundation` `google_storage_bucket.artifacts_bucket` — its configuration was removed"
    )


@pytest.mark.parametrize(
    "name, order, forced",
    [
        ("dev/replace-create-before-destroy.json", "create before destroy", "`machine_type`"),
        ("dev/replace-destroy-before-create.json", "destroy before create", "`location`"),
    ],
)
def test_replace_names_order_reason_and_forcing_attribute(name, order, forced):
    text = render(name)
    banner = next(ln for ln in text.splitlines() if ln.startswith("> - **replace**"))
    assert order in banner and "an attribute cannot be changed in place" in banner and f"forced by {forced}" in banner
    assert "# forces replacement" in text


def test_drift_has_its_own_section():
    text = render("dev/drift.json")
    assert "### Changed outside Terraform (drift)" in text
    assert 'labels.team = "ml"' in text  # removed by the refresh: shown as the before value
    assert "1 resource drifted outside Terraform" in text.splitlines()[2]


def test_sensitive_values_never_appear():
    text = render("dev/sensitive.json")
    for secret in SECRETS:
        assert secret not in text
    assert "secret_data = (sensitive) -> (sensitive)" in text
    assert "metadata.hf-token = (sensitive)" in text and 'metadata.trainstack-lang = "fr"' in text
    assert "| `hf_token` | update | `(sensitive)` | `(sensitive)` |" in text
    redacted = json.dumps(redact(json.loads((FIXTURES / "dev/sensitive.json").read_text())))
    assert not any(secret in redacted for secret in SECRETS)


def test_output_changes_section():
    text = render("dev/outputs.json")
    assert "### Output changes" in text
    assert '| `bucket_url` | update | `"gs://old"` | `"gs://new"` |' in text
    assert "| `registry_id` | create |  | `(known after apply)` |" in text
    assert '| `old_output` | delete | `"x"` |  |' in text


def test_training_stack_shows_gpus_zone_and_cost_of_one_run():
    text = render("dev/train-fr.json")
    line = next(ln for ln in text.splitlines() if ln.startswith("- `dev` · `train-fr`:"))
    # No quote stored with this plan: the fallback table prices it and the line says so.
    # europe-west4 g2-standard-8 with its L4: 0.4708 Spot x 4 h = 1.88; on-demand 0.8972 x 4 h = 3.59.
    assert "1 x g2-standard-8 with 1 x nvidia-l4 each, zone europe-west4-b" in line
    assert "Spot (planned) $1.88" in line and "on-demand $3.59" in line
    assert "(list prices: fallback table of 2026-07-30 (stacks/targets/gcp/prices.yaml); estimate)" in line
    assert "echo step" not in text and "metadata.startup-script = (202 lines" in text


def test_the_quote_stored_with_the_plan_prices_it_and_names_its_source():
    from stacks.plan_render import plan_from_document
    from stacks.plan_render.summary import training_lines

    doc = json.loads((FIXTURES / "dev/train-fr.json").read_text())
    doc.setdefault("trainstack", {})["prices"] = {
        "source": "Cloud Billing Catalog API, read 2026-11-25T16:00Z",
        "warning": "",
        "spot": {"vm_per_hour": 0.5, "note": ""},
        "on_demand": {"vm_per_hour": None, "note": "cost unknown: the Billing Catalog has no on-demand core/g2 SKU"},
    }
    (line,) = training_lines([plan_from_document(doc, env="dev", stack="train-fr", source="x")])
    assert "Spot (planned) $2.00" in line and "on-demand: cost unknown: the Billing Catalog has no" in line
    assert "(list prices: Cloud Billing Catalog API, read 2026-11-25T16:00Z; estimate)" in line


def test_a_flex_start_plan_is_priced_at_the_flex_start_rate():
    from stacks.plan_render import plan_from_document
    from stacks.plan_render.summary import training_lines

    doc = json.loads((FIXTURES / "dev/train-fr.json").read_text())
    for change in doc["resource_changes"]:
        if change["type"] == "google_compute_instance_template":
            change["change"]["after"]["scheduling"] = [{"provisioning_model": "FLEX_START", "preemptible": False}]
    (line,) = training_lines([plan_from_document(doc, env="dev", stack="train-fr", source="x")])
    # G2 has no flex-start discount: the on-demand 0.8972 x 4 h
    assert "flex-start (planned) $3.59" in line and "Spot $1.88" in line and "on-demand $3.59" in line


def test_startup_script_change_is_a_line_count_diff():
    text = render("dev/train-fr-update.json")
    assert "metadata.startup-script = 202 → 203 lines (+2 −1), sha256:" in text


def test_failed_plan_is_shown_with_its_error_and_no_fence_escape():
    text = render("dev/failed.json", "prod/foundation.json")
    assert text.splitlines()[2].startswith("❌ **Plan failed** for dev/train-en")
    assert "| `dev` | `train-en` | – | – | – | – | – | ❌ plan failed |" in text
    assert "````\n" in text and "Invalid provider configuration" in text
    assert "No changes: `prod` · `foundation`." in text


def test_folder_input_orders_env_then_foundation_first():
    plans = load_plan_files([FIXTURES / "prod", FIXTURES / "dev" / "delete.json"])
    assert [(p.env, p.stack) for p in plans] == [("dev", "foundation"), ("prod", "foundation")]


# --- the size budget -----------------------------------------------------------------------------


def big_plan(env: str, stack: str, n: int, *, delete: str | None = None, replace: str | None = None) -> dict:
    script = "#!/bin/bash\n" + "".join(f"echo {i}\n" for i in range(300))
    changes = []
    for i in range(n):
        after = {
            "name": f"{stack}-vm-{i}",
            "machine_type": "g2-standard-8",
            "zone": "europe-west4-b",
            "labels": {"app": "trainstack", "env": env, "index": str(i)},
            "startup": script,
            "password": f"pw-{i:04d}-sensitive",
        }
        changes.append(
            {
                "address": f"google_compute_instance.vm_{i:03d}",
                "type": "google_compute_instance",
                "mode": "managed",
                "change": {
                    "actions": ["create"],
                    "before": None,
                    "after": after,
                    "after_unknown": {"id": True},
                    "before_sensitive": False,
                    "after_sensitive": {"password": True},
                },
            }
        )
    if delete:
        changes.append(
            {
                "address": delete,
                "type": "google_storage_bucket",
                "mode": "managed",
                "action_reason": "delete_because_no_resource_config",
                "change": {"actions": ["delete"], "before": {"name": "b"}, "after": None},
            }
        )
    if replace:
        changes.append(
            {
                "address": replace,
                "type": "google_compute_instance_template",
                "mode": "managed",
                "action_reason": "replace_because_cannot_update",
                "change": {
                    "actions": ["create", "delete"],
                    "before": {"machine_type": "a"},
                    "after": {"machine_type": "b"},
                    "replace_paths": [["machine_type"]],
                },
            }
        )
    return {"format_version": "1.2", "resource_changes": changes, "trainstack": {"env": env, "stack": stack}}


def test_400_resources_with_one_delete_and_one_replace_fit_in_one_comment():
    docs = [big_plan("dev", f"train-l{k}", 50) for k in range(7)]
    docs.append(
        big_plan(
            "prod",
            "foundation",
            48,
            delete="google_storage_bucket.old_artifacts",
            replace="google_compute_instance_template.vms_template",
        )
    )
    plans = [plan_from_document(d, env="?", stack="?", source="gen") for d in docs]
    assert sum(len(p.changes) for p in plans) == 400
    text = render_markdown(plans, artifact="the `plan-json` artifact")
    assert len(text) < GITHUB_COMMENT_LIMIT
    head = "\n".join(text.splitlines()[:20])
    assert "**delete** `prod` · `foundation` `google_storage_bucket.old_artifacts`" in head
    assert "**replace** `prod` · `foundation` `google_compute_instance_template.vms_template`" in head
    assert "-sensitive" not in text
    assert "see the `plan-json` artifact" in text
    assert text.count("<details>") + text.count("(detail cut to fit") == 8  # every stack is still named


def test_a_huge_single_stack_keeps_verdict_table_and_banner():
    doc = big_plan("dev", "train-fr", 2_000, delete="google_storage_bucket.gone", replace="google_x.y")
    text = render_markdown([plan_from_document(doc, env="?", stack="?", source="gen")])
    assert len(text) < GITHUB_COMMENT_LIMIT
    assert text.count("> - **") == 2 and "2000 to create" in text.splitlines()[2]


def test_attribute_changes_report_unknown_and_added_blocks():
    plan = plan_from_document(
        json.loads((FIXTURES / "dev/train-fr.json").read_text()), env="dev", stack="x", source="t"
    )
    template = plan.changes[0]
    paths = {a.path: a.after for a in attribute_changes(template)}
    assert paths["id"] == "(known after apply)" and paths["guest_accelerator[0].type"] == '"nvidia-l4"'


# --- `trainctl plan`: renderer wiring and exit codes -------------------------------------------------


def invoke(*args: str):
    from typer.testing import CliRunner

    from stacks.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_from_json_renders_without_terraform(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no terraform, no gcloud
    out = tmp_path / "review.md"
    result = invoke(
        "plan",
        "--from-json",
        str(FIXTURES / "dev" / "delete.json"),
        str(FIXTURES / "prod"),
        "--markdown",
        str(out),
        "--artifact",
        "the `plan-json` artifact",
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "google_storage_bucket.artifacts_bucket" in text and "`prod` · `foundation`" in text


def test_from_json_needs_markdown_and_real_files(tmp_path):
    result = invoke("plan", "--from-json", str(FIXTURES / "prod"))
    assert result.exit_code == 2 and "--markdown OUT" in result.output
    result = invoke("plan", str(FIXTURES / "prod"), "--markdown", str(tmp_path / "o.md"))
    assert result.exit_code == 2 and "are read with --from-json" in result.output
    (tmp_path / "p.json").write_text("not json")
    result = invoke("plan", "--from-json", str(tmp_path / "p.json"), "--markdown", str(tmp_path / "o.md"))
    assert result.exit_code == 2 and "is not JSON" in result.output


@needs_terraform
def test_plan_of_local_stacks_writes_json_and_review_and_exits_4(project, tmp_path):
    result = invoke(
        "plan", "--env", "local", "--json-out", str(tmp_path / "json"), "--markdown", str(tmp_path / "plan.md")
    )
    assert result.exit_code == 4, result.output
    doc = json.loads((tmp_path / "json" / "local" / "train-fr.json").read_text())
    assert doc["trainstack"] == {"env": "local", "stack": "train-fr", "target": "local"}
    assert doc["resource_changes"][0]["type"] == "terraform_data"
    text = (tmp_path / "plan.md").read_text()
    assert "| `local` | `train-fr` | 1 |" in text and "| `local` | `train-en` | 1 |" in text
    assert "changes present in train-fr, train-en (exit 4)" in result.output


@needs_terraform
def test_json_out_file_holds_every_stack_and_renders(project, tmp_path):
    """DESIGN's `plan --json-out FILE`: one file holding every stack's plan; `--from-json FILE` renders it."""
    result = invoke("plan", "--env", "local", "--json-out", str(tmp_path / "plan.json"))
    assert result.exit_code == 4, result.output
    bundle = json.loads((tmp_path / "plan.json").read_text())
    assert [d["trainstack"]["stack"] for d in bundle["trainstack_plans"]] == ["train-fr", "train-en"]
    result = invoke("plan", "--from-json", str(tmp_path / "plan.json"), "--markdown", str(tmp_path / "review.md"))
    assert result.exit_code == 0, result.output
    text = (tmp_path / "review.md").read_text()
    assert "| `local` | `train-fr` | 1 |" in text and "| `local` | `train-en` | 1 |" in text
    single = tmp_path / "fr.json"
    assert invoke("plan", "--env", "local", "--stack", "train-fr", "--json-out", str(single)).exit_code == 4
    doc = json.loads(single.read_text())
    assert doc["trainstack"]["stack"] == "train-fr" and "resource_changes" in doc  # plain `terraform show -json`


class _Handle:
    def __init__(self, tf):
        self.tf = tf


@needs_terraform
@pytest.mark.parametrize("case, code", [("no-changes", 0), ("broken", 3)])
def test_plan_exit_codes(project, tmp_path, monkeypatch, case, code):
    from stacks.runs import stack_ops
    from stacks.terraform import Terraform

    workdir = tmp_path / case
    workdir.mkdir()
    write_config(workdir, {"only": {"input": "x"}})
    terraform(workdir, "init", "-input=false")
    terraform(workdir, "apply", "-input=false", "-auto-approve")
    if case == "broken":
        (workdir / "main.tf.json").write_text(json.dumps({"output": {"x": {"value": "${terraform_data.nope.id}"}}}))
    monkeypatch.setattr(stack_ops, "open_stack", lambda *a, **kw: _Handle(Terraform(workdir, "train-fr")))
    result = invoke("plan", "--env", "local", "--stack", "train-fr", "--markdown", str(tmp_path / "plan.md"))
    assert result.exit_code == code, result.output
    text = (tmp_path / "plan.md").read_text()
    if case == "broken":
        assert "terraform plan of stack train-fr failed" in result.output
        assert "❌ **Plan failed** for local/train-fr" in text and "terraform_data.nope" in text
    else:
        assert "no changes" in result.output and "✅ **No changes**" in text


# --- `trainctl apply`: only the reviewed plan --------------------------------------------------------


@pytest.fixture
def reviewed_stack(project, tmp_path, monkeypatch):
    """A real Terraform stack in place of train-fr, planned once with --json-out (the review)."""
    from stacks.runs import stack_ops
    from stacks.terraform import Terraform

    workdir = tmp_path / "stack"
    workdir.mkdir()
    write_config(workdir, {"only": {"input": "reviewed"}})
    terraform(workdir, "init", "-input=false")
    monkeypatch.setattr(stack_ops, "open_stack", lambda *a, **kw: _Handle(Terraform(workdir, "train-fr")))
    result = invoke("plan", "--env", "local", "--stack", "train-fr", "--json-out", str(tmp_path / "review"))
    assert result.exit_code == 4, result.output
    assert "hunter2-very-secret" not in (tmp_path / "review" / "local" / "train-fr.json").read_text()
    return workdir, tmp_path / "review"


@needs_terraform
def test_apply_applies_the_reviewed_plan(reviewed_stack):
    workdir, review = reviewed_stack
    result = invoke("apply", "--env", "local", "--stack", "train-fr", "--reviewed", str(review))
    assert result.exit_code == 0, result.output
    assert "applied 1 stack(s): train-fr" in result.output
    assert terraform(workdir, "state", "list").split() == ["terraform_data.only"]


@needs_terraform
def test_apply_refuses_a_plan_that_changed_since_the_review(reviewed_stack):
    workdir, review = reviewed_stack
    write_config(workdir, {"only": {"input": "changed after the review"}})
    result = invoke("apply", "--env", "local", "--stack", "train-fr", "--reviewed", str(review))
    assert result.exit_code == 2, result.output
    assert "train-fr: differs from the review at terraform_data.only" in result.output
    assert "nothing applied" in result.output
    state = workdir / "terraform.tfstate"
    assert not state.exists() or "terraform_data" not in state.read_text()


@needs_terraform
def test_apply_reads_a_review_written_to_one_file(reviewed_stack, tmp_path):
    workdir, _ = reviewed_stack
    review = tmp_path / "review.json"
    assert invoke("plan", "--env", "local", "--stack", "train-fr", "--json-out", str(review)).exit_code == 4
    result = invoke("apply", "--env", "local", "--stack", "train-fr", "--reviewed", str(review))
    assert result.exit_code == 0, result.output
    assert terraform(workdir, "state", "list").split() == ["terraform_data.only"]


@needs_terraform
def test_apply_without_a_review_applies_nothing(reviewed_stack, tmp_path):
    workdir, _ = reviewed_stack
    result = invoke("apply", "--env", "local", "--stack", "train-fr", "--reviewed", str(tmp_path / "nothing"))
    assert result.exit_code == 2 and "train-fr: no reviewed plan in" in result.output


def test_differences_ignore_timestamps_but_not_values():
    from stacks.plan_render.reviewed import differences

    doc = json.loads((FIXTURES / "dev" / "replace-create-before-destroy.json").read_text())
    later = {**json.loads(json.dumps(doc)), "timestamp": "2030-01-01T00:00:00Z", "terraform_version": "1.12.0"}
    assert differences(doc, later) == []
    later["resource_changes"][0]["change"]["after"]["machine_type"] = "g2-standard-32"
    assert differences(doc, later) == ["google_compute_instance_template.vms_template"]
    assert differences({"trainstack": {"error": "boom"}}, doc) == ["the reviewed plan failed"]


def test_a_config_error_is_recorded_for_the_review(project, tmp_path):
    result = invoke("plan", "--env", "local", "--set", "defaults.nodes=0", "--json-out", str(tmp_path / "json"))
    assert result.exit_code == 2, result.output
    doc = json.loads((tmp_path / "json" / "local" / "_env.json").read_text())
    assert doc["trainstack"]["stack"] == "(config)" and "nodes" in doc["trainstack"]["error"]
    text = render_markdown(load_plan_files([tmp_path / "json"]))
    assert "❌ **Plan failed** for local/(config)" in text


def test_an_expected_env_without_plans_is_shown_as_failed(tmp_path):
    out = tmp_path / "review.md"
    result = invoke(
        "plan",
        "--from-json",
        str(FIXTURES / "prod"),
        "--markdown",
        str(out),
        "--expect-env",
        "prod",
        "--expect-env",
        "dev",
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "❌ **Plan failed** for dev/(all)" in text and "no plan was produced for env dev" in text


def test_apply_never_touches_the_foundation(project, tmp_path):
    result = invoke("apply", "--env", "local", "--stack", "foundation", "--reviewed", str(tmp_path))
    assert result.exit_code == 2 and "applied by an operator" in result.output


@needs_terraform
def test_apply_checks_the_target_artifacts_before_applying_anything(reviewed_stack, monkeypatch):
    # Issue 38: the CI deploy could start a run whose image was never built (the VM then pulls and fails, billed).
    from stacks.errors import InfraError
    from stacks.targets.local.target import LOCAL

    workdir, review = reviewed_stack

    def missing(self, config):
        raise InfraError("the trainer image X is not in the registry", hint="build it")

    monkeypatch.setattr(type(LOCAL), "require_artifacts", missing)
    result = invoke("apply", "--env", "local", "--stack", "train-fr", "--reviewed", str(review))
    assert result.exit_code == 3 and "not in the registry" in result.output, result.output
    state = workdir / "terraform.tfstate"
    assert not state.exists() or "terraform_data" not in state.read_text()


@pytest.mark.parametrize(("answer", "built"), [(404, False), (200, True)])
def test_a_gcp_env_requires_the_image_of_this_tree_in_the_registry(project, monkeypatch, answer, built):
    from stacks.project import Project
    from stacks.targets.gcp.image import REGISTRY_ENDPOINT_ENV, ImageNotBuiltError
    from stacks.targets.gcp.target import GCP
    from tests.support.recorded_api import RecordedApi

    config = Project.discover().load("dev", ["gcp.project=p1"])
    body = {"errors": [{"code": "MANIFEST_UNKNOWN"}]} if answer == 404 else {}
    with RecordedApi({("HEAD", "/v2/p1/trainstack/trainer/manifests/[^/]+"): (answer, body)}) as api:
        monkeypatch.setenv(REGISTRY_ENDPOINT_ENV, api.url)
        if built:
            GCP.require_artifacts(config)
        else:
            with pytest.raises(ImageNotBuiltError) as err:
                GCP.require_artifacts(config)
            assert "trainctl image build --env dev" in err.value.hint and "deployer" in err.value.hint
        assert len(api.requests("HEAD", ".*")) == 1
