"""The trainer image: build context, content-hash tag, registry look-up, Cloud Build.

The tag is a hash of exactly the files Docker gets (the repo root filtered by
.dockerignore), so a tree that changes nothing the image holds keeps its image.
No cdktf here, and Google libraries are imported inside functions (`trainctl --help`).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import re
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from stacks import SOURCE_ROOT
from stacks.errors import InfraError, TrainstackError
from stacks.targets.gcp import api

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig

DOCKERFILE = "images/trainer/Dockerfile"
CLOUDBUILD = "images/trainer/cloudbuild.yaml"
SOURCE_PREFIX = "_cloudbuild"  # build contexts in the env bucket: _cloudbuild/<hash>.tgz
REGISTRY_ENDPOINT_ENV = "TRAINSTACK_REGISTRY_ENDPOINT"  # http://127.0.0.1:PORT replaces https://<host>
CLOUDBUILD_ENDPOINT_ENV = "TRAINSTACK_CLOUDBUILD_ENDPOINT"
CLOUDBUILD_API = "https://cloudbuild.googleapis.com"
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DONE = {"SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED"}
# Zip (inside the wheel pip builds in the image) cannot store times before 1980.
TAR_MTIME = 315532800


class ImageNotBuiltError(InfraError):
    """The registry has no image at the ref a run would use (preflight, exit 3)."""

    def __init__(self, ref: str, env: str | None = None):
        super().__init__(
            f"the trainer image {ref} is not in the registry (never built for this tree)",
            hint=f"build it: trainctl image build --env {env or '<env>'} (an operator: the CI "
            "deployer may read the registry, not run Cloud Build), then rerun",
        )
        self.ref = ref


def _pattern_regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as Docker reads it: Go filepath.Match syntax plus `**`."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
            continue
        if pattern.startswith("**", i):
            out, i = out + ".*", i + 2
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            out += "[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]"
            i = end
        elif c == "\\" and i + 1 < len(pattern):
            out, i = out + re.escape(pattern[i + 1]), i + 1
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out)


def _read_dockerignore(root: Path) -> list[tuple[bool, str, re.Pattern]]:
    """(negated, cleaned pattern, regex) in file order; the last matching rule wins."""
    path = root / ".dockerignore"
    rules = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = os.path.normpath(line[1:].strip() if negated else line).lstrip("/")
        rules.append((negated, pattern, _pattern_regex(pattern)))
    return rules


def _excluded(rel: str, rules) -> bool:
    parts = rel.split("/")
    candidates = [rel] + ["/".join(parts[:n]) for n in range(1, len(parts))]
    excluded = False
    for negated, _, regex in rules:
        if any(regex.fullmatch(c) for c in candidates):  # a rule on a folder covers its contents
            excluded = not negated
    return excluded


def _may_reinclude(rel_dir: str, rules) -> bool:
    """Could a `!` rule let in something under an excluded folder? (else the walk skips it)"""
    for negated, pattern, _ in rules:
        if negated:
            literal = re.split(r"[*?\[\\]", pattern, maxsplit=1)[0]
            if literal.startswith(rel_dir + "/") or (rel_dir + "/").startswith(literal):
                return True
    return False


def context_files(root: Path) -> list[Path]:
    """The files Docker gets from `root` (paths relative to it, sorted): .dockerignore applied."""
    root = Path(root)
    if not (root / DOCKERFILE).is_file():
        raise TrainstackError(
            f"no {DOCKERFILE} under {root}", hint="build the image from a trainstack checkout (pip install -e .)"
        )
    rules = _read_dockerignore(root)
    found = []
    for folder, dirs, files in os.walk(root):
        rel_folder = Path(folder).relative_to(root).as_posix()
        rel_folder = "" if rel_folder == "." else rel_folder + "/"
        dirs[:] = sorted(
            d
            for d in dirs
            if d != "__pycache__" and (not _excluded(rel_folder + d, rules) or _may_reinclude(rel_folder + d, rules))
        )
        for name in files:
            rel = rel_folder + name
            if not _excluded(rel, rules) and (root / rel).is_file():
                found.append(rel)
    return [Path(rel) for rel in sorted(found)]


def _executable(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o111)


def content_hash(root: Path) -> str:
    """16 hex digits of sha256 over the context's paths, exec bits and bytes (not mtimes)."""
    digest = hashlib.sha256()
    for rel in context_files(root):
        data = (Path(root) / rel).read_bytes()
        mode = "x" if _executable(Path(root) / rel) else "-"
        digest.update(f"{rel.as_posix()}\0{mode}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def context_tarball(root: Path) -> bytes:
    """The build context as a reproducible .tgz: sorted, fixed times/owners, no gzip name."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel in context_files(root):
            path = Path(root) / rel
            data = path.read_bytes()
            info = tarfile.TarInfo(rel.as_posix())
            info.size, info.mtime = len(data), TAR_MTIME
            info.mode = 0o755 if _executable(path) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def image_ref(config: EnvConfig, root: Path = SOURCE_ROOT) -> str:
    """`config.gcp.image` when set, else <region>-docker.pkg.dev/<project>/<registry>/trainer:<hash>."""
    return config.gcp.image or f"{config.gcp.image_repository}:{content_hash(root)}"


def split_ref(ref: str) -> tuple[str, str, str]:
    """`host/path:tag` or `host/path@sha256:...` -> (host, path, tag or digest)."""
    name, _, digest = ref.partition("@")
    host, _, path = name.partition("/")
    tag = ""
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
    if not path or ("." not in host and ":" not in host) or not (digest or tag):
        raise TrainstackError(
            f"image {ref!r} is not a full reference (registry host/path:tag)",
            hint="e.g. europe-west4-docker.pkg.dev/PROJECT/trainstack/trainer:TAG",
        )
    return host, path, digest or tag


def image_exists(ref: str) -> bool:
    """Ask the registry (Docker Registry v2 API) whether `ref`'s manifest exists."""
    host, path, reference = split_ref(ref)
    session, base = api.session(REGISTRY_ENDPOINT_ENV)
    url = f"{base or 'https://' + host}/v2/{path}/manifests/{reference}"
    resp = api.call(session, "HEAD", url, f"cannot look up {ref}", headers={"Accept": ", ".join(MANIFEST_TYPES)})
    if resp.status_code == 200:
        return True
    if resp.status_code == 404:
        return False
    if resp.status_code in (401, 403):
        raise InfraError(
            f"the registry {host} refused to look up {ref} (HTTP {resp.status_code})",
            hint="you need roles/artifactregistry.reader on the repository; "
            "check `gcloud auth application-default login`",
        )
    raise InfraError(f"the registry {host} answered HTTP {resp.status_code} for {ref}", hint="retry in a moment")


def require_image(ref: str, env: str | None = None) -> None:
    """Preflight: raise ImageNotBuiltError (exit 3) unless the registry has `ref`."""
    if not image_exists(ref):
        raise ImageNotBuiltError(ref, env)


@dataclass(frozen=True)
class BuildResult:
    ref: str
    built: bool  # False: the registry already had it
    build_id: str | None = None
    log_url: str | None = None


def builder_account(config: EnvConfig) -> str:
    """The foundation's Cloud Build service account (not the project's default compute account)."""
    from stacks.naming import BUILDER_SA, sa_email

    return f"projects/{config.gcp.project}/serviceAccounts/{sa_email(BUILDER_SA, config.gcp.project)}"


def build_request(
    root: Path, ref: str, bucket: str, obj: str, service_account: str | None = None, generation: int | None = None
) -> dict:
    """The Build resource: images/trainer/cloudbuild.yaml + source (pinned to `generation`) + _IMAGE."""
    import yaml

    build = yaml.safe_load((Path(root) / CLOUDBUILD).read_text(encoding="utf-8"))
    build["substitutions"] = {**(build.get("substitutions") or {}), "_IMAGE": ref}
    build["source"] = {"storageSource": {"bucket": bucket, "object": obj}}
    if generation is not None:  # int64 in JSON: a string
        build["source"]["storageSource"]["generation"] = str(generation)
    if service_account:
        build["serviceAccount"] = service_account
    return build


def crc32c_of(data: bytes) -> str:
    """Base64 CRC32C, as Cloud Storage reports it in object metadata."""
    import google_crc32c

    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


@dataclass(frozen=True)
class BuildContext:
    """The context object a build reads: name and the exact generation checked or written."""

    object: str
    generation: int
    reused: bool


def upload_context(config: EnvConfig, root: Path, digest: str, echo: Callable[[str], None] = print) -> BuildContext:
    """Put the context tarball in `_cloudbuild/<hash>.tgz`, reusing an object only if its CRC32C matches.

    Whoever can write the bucket could have planted that name: a copy whose checksum differs
    is replaced, and the build is pinned to the generation checked or written here, so a
    later overwrite cannot change what Cloud Build reads.
    """
    obj, data = f"{SOURCE_PREFIX}/{digest}.tgz", context_tarball(root)
    crc, url = crc32c_of(data), f"gs://{config.bucket_name}/{SOURCE_PREFIX}/{digest}.tgz"
    try:
        bucket = api.storage_client(config.gcp.project).bucket(config.bucket_name)
        found = bucket.get_blob(obj)
        if found is not None and found.crc32c == crc and found.size == len(data):
            return BuildContext(obj, int(found.generation), reused=True)
        if found is not None:
            echo(f"{url} is not this tree's build context (crc32c {found.crc32c}, expected {crc}): replacing it")
        blob = bucket.blob(obj)
        # Replace exactly the object looked at (or create): a concurrent writer makes this fail.
        blob.upload_from_string(
            data,
            content_type="application/gzip",
            checksum="crc32c",
            if_generation_match=int(found.generation) if found is not None else 0,
        )
    except api.client_failures() as exc:
        raise api.google_error(
            exc,
            f"uploading the build context to {url}",
            project=config.gcp.project,
            api_name="Cloud Storage API",
            service="storage.googleapis.com",
            role=f"roles/storage.objectAdmin (objects under {SOURCE_PREFIX}/ of the bucket)",
            missing_hint=f"the bucket comes from the foundation stack: cdktf deploy foundation-{config.env} first",
        ) from exc
    if blob.crc32c and blob.crc32c != crc:
        raise InfraError(f"{url}: Cloud Storage stored crc32c {blob.crc32c}, expected {crc}", hint="retry the build")
    return BuildContext(obj, int(blob.generation), reused=False)


def submit_build(
    config: EnvConfig,
    root: Path = SOURCE_ROOT,
    *,
    echo: Callable[[str], None] = print,
    poll_s: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
) -> BuildResult:
    """Build and push the trainer image with Cloud Build unless the registry already has it.

    There is no rebuild of an existing tag: the repository's tags are immutable.
    """
    ref = image_ref(config, root)
    if image_exists(ref):
        echo(f"{ref} is already in the registry: nothing to build")
        return BuildResult(ref, built=False)
    digest = content_hash(root)
    context = upload_context(config, root, digest, echo)
    echo(
        f"{'reusing' if context.reused else 'uploaded'} the build context ({len(context_files(root))} files): "
        f"gs://{config.bucket_name}/{context.object}#{context.generation}"
    )
    session, base = api.session(CLOUDBUILD_ENDPOINT_ENV)
    builds = f"{base or CLOUDBUILD_API}/v1/projects/{config.gcp.project}/locations/{config.gcp.region}/builds"
    resp = api.call(
        session,
        "POST",
        builds,
        "cannot submit the Cloud Build build",
        json=build_request(root, ref, config.bucket_name, context.object, builder_account(config), context.generation),
    )
    if resp.status_code != 200:
        raise InfraError(
            f"Cloud Build refused the build (HTTP {resp.status_code}): {api.api_message(resp)}",
            hint="enable cloudbuild.googleapis.com (foundation stack) and check that you have "
            "roles/cloudbuild.builds.editor",
        )
    build = resp.json()["metadata"]["build"]
    build_id, log_url, status = build["id"], build.get("logUrl", ""), build.get("status", "QUEUED")
    echo(f"Cloud Build {build_id}: {status} (log: {log_url})")
    # The build's own timeout, plus Cloud Build's default queue TTL (an hour).
    deadline = time.monotonic() + float(str(build.get("timeout") or "3600s").rstrip("s")) + 3600
    while True:
        resp = api.call(session, "GET", f"{builds}/{build_id}", f"cannot read Cloud Build {build_id}")
        if resp.status_code != 200:
            raise InfraError(
                f"cannot read Cloud Build {build_id} (HTTP {resp.status_code}): {api.api_message(resp)}",
                hint=f"the build goes on; follow it at {log_url}",
            )
        build = resp.json()
        if build.get("status", status) != status:
            status = build["status"]
            echo(f"Cloud Build {build_id}: {status}")
        if status in DONE:
            break
        if time.monotonic() > deadline:
            raise InfraError(f"Cloud Build {build_id} is still {status}", hint=f"follow it at {log_url}")
        sleep(poll_s)
    log_url = build.get("logUrl") or log_url
    if status != "SUCCESS":
        detail = (build.get("failureInfo") or {}).get("detail") or build.get("statusDetail") or ""
        raise InfraError(
            f"Cloud Build {build_id} ended {status}" + (f": {detail}" if detail else ""),
            hint=f"read the build log: {log_url}",
        )
    return BuildResult(ref, built=True, build_id=build_id, log_url=log_url)
