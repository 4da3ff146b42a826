"""Policy: checkov finds no unjustified misconfiguration in the synthesized gcp stacks.

checkov runs as a program from its own virtual environment, `.venv-lint` (made by `make`
from requirements-lint.txt): its pins would downgrade packages torch, fastai and pytest use
in `.venv`. `TRAINSTACK_CHECKOV=/path/to/checkov` points the suite at another executable.

Skips. checkov's terraform_json runner ignores inline skip comments (bridgecrewio/checkov#4634:
nothing in cdk.tf.json can suppress a finding), so this module reads them from the resource's
cdktf comment block and applies them to checkov's findings itself. A skip sits next to the
resource it excuses and must say why:

    resource.add_override("//.checkov.skip.CKV_GCP_84", "why this check does not apply here")

which cdktf merges into its own comment block (one call per check; calls accumulate):

    "//": {"checkov": {"skip": {"CKV_GCP_84": "why ..."}}, "metadata": {"path": ..., "uniqueId": ...}}

checkov's own comment syntax is accepted too, as a string or a list of strings:
`"//": {"checkov": "checkov:skip=CKV_GCP_62: why ..."}`. Never `add_override("//", "<string>")`:
cdktf merges a string into its metadata object character by character.

A skip without a reason, one checkov cannot read, or one whose check does not fail on that
resource (a typo, or the resource was fixed) fails the suite.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.iam_conditions import condition_holds
from tests.support.project import REPO, make_project

FIXTURES = REPO / "tests" / "fixtures" / "policy"
LINT_VENV = REPO / ".venv-lint"
REQUIREMENTS = REPO / "requirements-lint.txt"
# Every gcp env whose stacks must pass; the overrides make the env synthesizable offline.
# prod's `en` is made multi-node so the placement policy and per-instance configs are scanned too.
CI_SETS = ["ci.github_repository=acme/trainstack", "ci.github_repository_id=101", "ci.github_repository_owner_id=202"]
ENVS = {
    "dev": ["gcp.project=p1", *CI_SETS],
    "prod": [
        "gcp.project=p2",
        *CI_SETS,
        "languages.en.nodes=2",
        "languages.en.gcp.machine_type=a2-highgpu-2g",
        "languages.en.gcp.gpu.count=2",
    ],
}
# checkov's own grammar (checkov/common/comment/enum.py: COMMENT_REGEX).
SKIP_COMMENT = re.compile(r"(?:checkov|bridgecrew|cortex):skip= *([A-Za-z_\d-]+(?:,[A-Za-z_\d-]+)*)?(?::([^\n]*))?")


# ---------------------------------------------------------------- running checkov


def checkov_executable() -> Path:
    """The checkov program of .venv-lint (or $TRAINSTACK_CHECKOV); fails the test when missing."""
    override = os.environ.get("TRAINSTACK_CHECKOV")
    exe = Path(override) if override else LINT_VENV / "bin" / "checkov"
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        pytest.fail(
            f"checkov not found at {exe}: run `make setup` (creates {LINT_VENV.name} from "
            f"{REQUIREMENTS.name}), or set TRAINSTACK_CHECKOV to a checkov executable",
            pytrace=False,
        )
    return exe


def pinned_checkov_version() -> str:
    match = re.search(r"^checkov==(\S+)", REQUIREMENTS.read_text(), re.MULTILINE)
    assert match, f"{REQUIREMENTS.name} pins no checkov version"
    return match.group(1)


def run_checkov(root: Path, timeout: int = 300) -> list[dict]:
    """Scan every *.tf.json under `root` in one checkov process (start-up, ~3 s, dominates); return its reports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BC_API", "PRISMA_"))}
    # Offline and quiet: no update check against PyPI, no guideline download from the Prisma Cloud API.
    env.update(CKV_SKIP_PACKAGE_UPDATE_CHECK="true", BC_SKIP_MAPPING="TRUE", LOG_LEVEL="WARNING")
    cmd = [
        str(checkov_executable()),
        "--directory",
        str(root),
        "--framework",
        "terraform_json",
        "--output",
        "json",
        "--skip-download",
        "--compact",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode not in (0, 1):  # 1: some check failed; anything else: checkov itself failed
        pytest.fail(f"checkov exited {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-3000:]}", pytrace=False)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"checkov printed no JSON report:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}", pytrace=False)
    return out if isinstance(out, list) else [out]


# ---------------------------------------------------------------- skips written in the stacks


@dataclass(frozen=True)
class Skip:
    check_id: str
    reason: str


@dataclass
class Resource:
    stack: str
    address: str  # type.name, as Terraform names it
    skips: list[Skip] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  # skip entries that could not be read


def parse_skips(comment) -> tuple[list[Skip], list[str]]:
    """The skips of one resource's `"//".checkov` value; returns (skips, entries that are not skips)."""
    if comment is None:
        return [], []
    if isinstance(comment, dict) and set(comment) == {"skip"}:
        entries = comment["skip"]
        if isinstance(entries, dict):  # {"CKV_GCP_84": "reason"}: what add_override("//.checkov.skip.ID") writes
            return [Skip(str(k), v.strip() if isinstance(v, str) else "") for k, v in entries.items()], []
        if isinstance(entries, list) and all(isinstance(e, dict) and "id" in e for e in entries):
            return [Skip(str(e["id"]), str(e.get("comment") or "").strip()) for e in entries], []  # checkov#4634 form
        return [], [json.dumps(comment)]
    if isinstance(comment, str):
        comment = [comment]
    if not isinstance(comment, list):
        return [], [json.dumps(comment)]
    skips, invalid = [], []
    for entry in comment:
        matches = list(SKIP_COMMENT.finditer(entry)) if isinstance(entry, str) else []
        if not matches or any(not m.group(1) for m in matches):
            invalid.append(json.dumps(entry))
        for m in matches:
            for check_id in (m.group(1) or "").split(","):
                if check_id:
                    skips.append(Skip(check_id, (m.group(2) or "").strip()))
    return skips, invalid


def index_resources(root: Path) -> dict[Path, dict[str, Resource]]:
    """cdk.tf.json file -> logical name -> Resource, for every resource and data source under `root`."""
    index: dict[Path, dict[str, Resource]] = {}
    for path in sorted(root.rglob("*.tf.json")):
        doc = json.loads(path.read_text())
        by_name: dict[str, Resource] = {}
        for block, prefix in (("resource", ""), ("data", "data.")):
            for rtype, resources in doc.get(block, {}).items():
                for name, conf in resources.items():
                    if name == "//":
                        continue
                    comment = conf.get("//") if isinstance(conf, dict) else None
                    skips, invalid = parse_skips(comment.get("checkov") if isinstance(comment, dict) else None)
                    # checkov names a terraform_json finding `resource.<name>` (no type): names must be unique.
                    assert name not in by_name, f"{path}: two blocks named {name!r}; findings would be ambiguous"
                    by_name[name] = Resource(path.parent.name, f"{prefix}{rtype}.{name}", skips, invalid)
        index[path.resolve()] = by_name
    return index


# ---------------------------------------------------------------- checkov's findings, skips applied


@dataclass(frozen=True)
class Finding:
    stack: str
    check_id: str
    check_name: str
    address: str
    where: str  # file:first-last line

    def __str__(self) -> str:
        return f"{self.stack}: {self.check_id} {self.address} ({self.where}) {self.check_name}"


@dataclass
class PolicyResult:
    checkov_version: str = ""
    parsing_errors: list[str] = field(default_factory=list)
    scanned: dict[str, int] = field(default_factory=dict)  # stack -> checks evaluated (passed + failed)
    failed: list[Finding] = field(default_factory=list)  # neither passed nor skipped with a reason
    skipped: list[tuple[Finding, Skip]] = field(default_factory=list)
    unjustified: list[tuple[Resource, Skip]] = field(default_factory=list)
    invalid: list[tuple[Resource, str]] = field(default_factory=list)
    unused: list[tuple[Resource, Skip]] = field(default_factory=list)


def _resource_of(record: dict, root: Path, index: dict[Path, dict[str, Resource]]) -> tuple[Path, Resource]:
    path = (root / record["file_path"].lstrip("/")).resolve()
    entity = record["resource"]  # resource.<name> (python checks) or <type>.<name> (graph checks)
    name = entity.split(".")[-1]
    resource = index.get(path, {}).get(name)
    if resource is None:  # a provider or module block: nothing to skip on
        resource = Resource(path.parent.name, entity)
    return path, resource


def evaluate(reports: list[dict], root: Path) -> PolicyResult:
    """Apply the skips written in the stacks under `root` to checkov's reports of the same folder."""
    index = index_resources(root)
    result = PolicyResult()
    failing: set[tuple[str, str]] = set()  # (address, check id) that checkov failed
    for report in reports:
        summary = report.get("summary", report)
        result.checkov_version = summary.get("checkov_version", result.checkov_version)
        results = report.get("results", {})
        result.parsing_errors += results.get("parsing_errors", [])
        for record in results.get("passed_checks", []) + results.get("failed_checks", []):
            path, resource = _resource_of(record, root, index)
            result.scanned[resource.stack] = result.scanned.get(resource.stack, 0) + 1
            if record["check_result"]["result"] != "FAILED":
                continue
            first, last = record["file_line_range"]
            finding = Finding(
                resource.stack,
                record["check_id"],
                record.get("check_name") or "",
                resource.address,
                f"{path.name}:{first}-{last}",
            )
            failing.add((resource.address, finding.check_id))
            skip = next((s for s in resource.skips if s.check_id == finding.check_id and s.reason), None)
            if skip:
                result.skipped.append((finding, skip))
            else:
                result.failed.append(finding)
    for by_name in index.values():
        for resource in by_name.values():
            result.invalid += [(resource, entry) for entry in resource.invalid]
            for skip in resource.skips:
                if not skip.reason:
                    result.unjustified.append((resource, skip))
                elif (resource.address, skip.check_id) not in failing:
                    result.unused.append((resource, skip))
    return result


def failure_message(result: PolicyResult) -> str:
    lines = []
    if result.failed:
        lines.append(f"{len(result.failed)} failed checkov check(s):")
        lines += [f"  {f}" for f in sorted(result.failed, key=str)]
        lines.append(
            "fix the resource, or skip with a reason next to it: "
            'resource.add_override("//.checkov.skip.<CHECK_ID>", "<why it does not apply>")'
        )
    return "\n".join(lines)


def skip_problems(result: PolicyResult) -> str:
    lines = [f"  {r.stack}: {r.address}: skip of {s.check_id} gives no reason" for r, s in result.unjustified]
    lines += [
        f"  {r.stack}: {r.address}: unreadable skip {entry} (write "
        f'"//": {{"checkov": {{"skip": {{"CKV_...": "reason"}}}}}})'
        for r, entry in result.invalid
    ]
    lines += [
        f"  {r.stack}: {r.address}: skip of {s.check_id} is unused: checkov does not fail it there "
        f"(typo, or fixed: remove the skip)"
        for r, s in result.unused
    ]
    return "\n".join(["skips to fix:", *lines]) if lines else ""


# ---------------------------------------------------------------- the gcp stacks


@pytest.fixture(scope="module", params=sorted(ENVS))
def gcp_policy(request, tmp_path_factory):
    """Synthesize every stack of a gcp env once, scan them all with one checkov run."""
    from stacks.app import synth
    from stacks.project import Project

    checkov_executable()  # fail before the slow synth when checkov is missing
    env = request.param
    root = make_project(tmp_path_factory.mktemp(f"policy-{env}") / "proj")
    config = Project.discover(root).load(env, ENVS[env])
    names = synth(config, Project(root), root / "cdktf.out")
    stacks_dir = root / "cdktf.out" / "stacks"
    return env, names, evaluate(run_checkov(stacks_dir), stacks_dir)


def test_checkov_scanned_every_stack(gcp_policy):
    env, names, result = gcp_policy
    assert result.checkov_version == pinned_checkov_version(), (
        f"checkov {result.checkov_version} ran, {REQUIREMENTS.name} pins {pinned_checkov_version()}: run `make setup`"
    )
    assert not result.parsing_errors, f"checkov could not parse: {result.parsing_errors}"
    assert "foundation" in names
    missing = [n for n in names if not result.scanned.get(n)]
    assert not missing, f"env {env}: checkov evaluated no check in stack(s) {missing}"


def test_no_failed_checkov_checks(gcp_policy):
    env, _, result = gcp_policy
    if result.failed:
        pytest.fail(f"env {env}: {failure_message(result)}", pytrace=False)


def test_every_skip_is_justified_and_used(gcp_policy):
    env, _, result = gcp_policy
    problems = skip_problems(result)
    if problems:
        pytest.fail(f"env {env}: {problems}", pytrace=False)


# ---------------------------------------------------------------- the harness itself (hand-written JSON)


@pytest.fixture(scope="module")
def fixture_policy():
    """One checkov run over tests/fixtures/policy/{secure,insecure}/cdk.tf.json."""
    return evaluate(run_checkov(FIXTURES), FIXTURES)


def test_secure_fixture_passes_with_its_justified_skips(fixture_policy):
    result = fixture_policy
    assert result.checkov_version == pinned_checkov_version()
    assert result.scanned["secure"] >= 25
    assert [f for f in result.failed if f.stack == "secure"] == []
    skipped = {(f.check_id, f.address): s.reason for f, s in fixture_policy.skipped if f.stack == "secure"}
    assert set(skipped) == {
        ("CKV_GCP_62", "google_storage_bucket.artifacts_access_logs"),  # checkov:skip= string
        ("CKV_GCP_84", "google_artifact_registry_repository.registry_repository"),
    }  # mapping
    assert all(skipped.values())
    assert not [r for r, _ in result.unjustified + result.unused + result.invalid if r.stack == "secure"]


def test_insecure_fixture_fails_each_misconfiguration(fixture_policy):
    failed = {(f.check_id, f.address) for f in fixture_policy.failed if f.stack == "insecure"}
    bucket, template = "google_storage_bucket.open", "google_compute_instance_template.bad"
    assert failed == {
        ("CKV_GCP_29", bucket),
        ("CKV_GCP_63", bucket),
        ("CKV_GCP_78", bucket),
        ("CKV_GCP_114", bucket),
        ("CKV_GCP_84", "google_artifact_registry_repository.repo"),
        ("CKV_GCP_117", "google_project_iam_member.editor"),
        ("CKV_GCP_46", "google_project_iam_member.editor"),
        ("CKV_GCP_49", "google_project_iam_member.editor"),
        ("CKV_GCP_41", "google_project_iam_member.sa_user"),
        ("CKV_GCP_49", "google_project_iam_member.sa_user"),
        ("CKV_GCP_42", "google_project_iam_member.admin_literal"),
        ("CKV_GCP_28", "google_storage_bucket_iam_member.public"),
        ("CKV_GCP_118", "google_iam_workload_identity_pool_provider.gh"),
        ("CKV_GCP_125", "google_iam_workload_identity_pool_provider.gh"),
        *(
            (c, template)
            for c in (
                "CKV_GCP_30",
                "CKV_GCP_31",
                "CKV_GCP_32",
                "CKV_GCP_34",
                "CKV_GCP_35",
                "CKV_GCP_36",
                "CKV_GCP_39",
                "CKV_GCP_40",
            )
        ),
    }
    message = failure_message(fixture_policy)
    assert "insecure: CKV_GCP_29 google_storage_bucket.open (cdk.tf.json:" in message
    assert 'add_override("//.checkov.skip.<CHECK_ID>"' in message


def test_insecure_fixture_skips_without_reason_do_not_count(fixture_policy):
    """A skip with no reason leaves the finding failed and is reported; so are unreadable and stale skips."""
    unjustified = {(r.address, s.check_id) for r, s in fixture_policy.unjustified}
    assert unjustified == {("google_storage_bucket.open", "CKV_GCP_78"), ("google_storage_bucket.open", "CKV_GCP_114")}
    assert [(r.address, e) for r, e in fixture_policy.invalid] == [
        ("google_project_iam_member.sa_user", '"skip CKV_GCP_41 please"')
    ]
    assert [(r.address, s.check_id) for r, s in fixture_policy.unused] == [
        ("google_storage_bucket_iam_member.public", "CKV_GCP_29")
    ]
    problems = skip_problems(fixture_policy)
    assert "google_storage_bucket.open: skip of CKV_GCP_78 gives no reason" in problems
    assert "skip of CKV_GCP_29 is unused" in problems


# ---------------------------------------------------------------- pure helpers (no checkov)


@pytest.mark.parametrize(
    ("comment", "skips", "invalid"),
    [
        (None, [], []),
        ("checkov:skip=CKV_GCP_62: log sink", [Skip("CKV_GCP_62", "log sink")], []),
        (
            "checkov:skip=CKV_GCP_62,CKV_GCP_78:both: with colon",
            [Skip("CKV_GCP_62", "both: with colon"), Skip("CKV_GCP_78", "both: with colon")],
            [],
        ),
        (["checkov:skip=CKV_A: a", "checkov:skip=CKV_B"], [Skip("CKV_A", "a"), Skip("CKV_B", "")], []),
        ({"skip": {"CKV_GCP_84": " no CMEK "}}, [Skip("CKV_GCP_84", "no CMEK")], []),
        ({"skip": [{"id": "CKV_GCP_84", "comment": "x"}]}, [Skip("CKV_GCP_84", "x")], []),
        ("please skip CKV_GCP_62", [], ['"please skip CKV_GCP_62"']),
        ("checkov:skip=: no id", [], ['"checkov:skip=: no id"']),
        ({"CKV_GCP_84": "x"}, [], ['{"CKV_GCP_84": "x"}']),
    ],
)
def test_parse_skips(comment, skips, invalid):
    assert parse_skips(comment) == (skips, invalid)


def test_evaluate_turns_an_unskipped_finding_into_a_failure(tmp_path):
    stack = tmp_path / "stacks" / "s"
    stack.mkdir(parents=True)
    (stack / "cdk.tf.json").write_text(
        json.dumps(
            {
                "resource": {
                    "google_storage_bucket": {
                        "a": {"//": {"checkov": {"skip": {"CKV_GCP_62": "sink"}}}, "name": "a"},
                        "b": {"name": "b"},
                    }
                }
            }
        )
    )
    record = {
        "check_id": "CKV_GCP_62",
        "check_name": "Bucket should log access",
        "file_path": "/s/cdk.tf.json",
        "file_line_range": [1, 1],
        "check_result": {"result": "FAILED"},
    }
    report = {
        "summary": {"checkov_version": "x"},
        "results": {
            "passed_checks": [],
            "failed_checks": [{**record, "resource": "resource.a"}, {**record, "resource": "resource.b"}],
        },
    }
    result = evaluate([report], tmp_path / "stacks")
    assert [str(f) for f in result.failed] == [
        "s: CKV_GCP_62 google_storage_bucket.b (cdk.tf.json:1-1) Bucket should log access"
    ]
    assert [(f.address, s.reason) for f, s in result.skipped] == [("google_storage_bucket.a", "sink")]
    assert result.scanned == {"s": 2} and not result.unused and not result.unjustified


# ---------------------------------------------------------------- least privilege on the bucket (no checkov)

# Roles that can create, overwrite or delete objects, and the ones that can only read them.
WRITE_ROLES = {
    "roles/storage.objectUser",
    "roles/storage.objectCreator",
    "roles/storage.objectAdmin",
    "roles/storage.admin",
    "roles/storage.legacyBucketWriter",
    "roles/storage.legacyBucketOwner",
}
READ_ROLES = WRITE_ROLES | {"roles/storage.objectViewer", "roles/storage.legacyObjectReader"}


@pytest.fixture(scope="module")
def dev_foundation(tmp_path_factory) -> dict:
    from stacks.app import synth
    from stacks.project import Project

    root = make_project(tmp_path_factory.mktemp("least-privilege") / "proj")
    config = Project.discover(root).load("dev", ["gcp.project=p1", "languages.de={}", *CI_SETS])
    synth(config, Project(root), root / "cdktf.out")
    return json.loads((root / "cdktf.out" / "stacks" / "foundation" / "cdk.tf.json").read_text())


def storage_grants(doc: dict, account: str) -> list[dict]:
    """Bucket-level grants to `account` (by its Terraform reference in `member`)."""
    grants = doc["resource"].get("google_storage_bucket_iam_member", {}).values()
    return [g for g in grants if f"google_service_account.{account}" in g["member"]]


def allowed(grants: list[dict], roles: set[str], obj: str, bucket: str = "trainstack-dev-artifacts") -> bool:
    name = f"projects/_/buckets/{bucket}/objects/{obj}"
    return any(
        g["role"] in roles
        and condition_holds((g.get("condition") or {}).get("expression"), "storage.googleapis.com/Object", name)
        for g in grants
    )


def test_condition_evaluator_reads_the_grammar_it_is_given():
    expr = (
        'resource.type == "storage.googleapis.com/Object" && '
        '(resource.name.startsWith("a/") || resource.name.startsWith("b/"))'
    )
    assert condition_holds(expr, "storage.googleapis.com/Object", "b/x")
    assert not condition_holds(expr, "storage.googleapis.com/Object", "c/x")
    assert not condition_holds(expr, "storage.googleapis.com/Bucket", "a/x")
    group = 'resource.name.extract("/instanceGroupManagers/{name}").startsWith("dev-")'
    assert condition_holds(group, "t", "projects/p/zones/z/instanceGroupManagers/dev-a")
    assert not condition_holds(group, "t", "projects/p/zones/z/instanceGroupManagers/prod-a")
    assert not condition_holds(group, "t", "projects/p/zones/z/instances/dev-a")  # no match: extract gives ""
    with pytest.raises(AssertionError, match="grammar"):
        condition_holds('resource.name.endsWith("x")', "t", "x")


def test_trainer_writes_only_its_languages_run_lm_and_cache_prefixes(dev_foundation):
    grants = storage_grants(dev_foundation, "trainer_account")
    assert grants, "the trainer account has no bucket grant"
    for lang in ("de", "en", "fr"):
        for obj in (
            f"{lang}/runs/20261125-010000-ab12/status.json",
            f"{lang}/lm/CURRENT",
            f"{lang}/lm/20261125/weights.pth",
            f"{lang}/cache/0123abcd/tokens.npz",
        ):
            assert allowed(grants, WRITE_ROLES, obj), obj
        assert allowed(grants, READ_ROLES, f"{lang}/data/train.csv")
        assert not allowed(grants, WRITE_ROLES, f"{lang}/data/train.csv")  # data is the operator's
        assert not allowed(grants, WRITE_ROLES, f"{lang}/runsX/x") and not allowed(grants, WRITE_ROLES, f"{lang}/x")
    for obj in (
        "_cloudbuild/0123456789abcdef.tgz",
        "it/runs/r/status.json",
        "runs/r/status.json",
        "CURRENT",
        "fr",
        "xfr/runs/r/status.json",
    ):
        assert not allowed(grants, READ_ROLES, obj), obj
    # Listing is checked on the bucket itself: names only.
    lister = [
        g
        for g in grants
        if condition_holds(
            g["condition"]["expression"], "storage.googleapis.com/Bucket", "projects/_/buckets/trainstack-dev-artifacts"
        )
    ]
    assert [g["role"] for g in lister] == ["roles/storage.objectViewer"]
    assert all(g.get("condition") for g in grants)  # no unconditioned grant on the bucket


def test_trainer_has_no_project_wide_storage_role(dev_foundation):
    members = dev_foundation["resource"]["google_project_iam_member"].values()
    trainer = [m for m in members if "google_service_account.trainer_account" in m["member"]]
    assert not [m["role"] for m in trainer if "storage" in m["role"]]


def test_only_the_builder_reads_build_contexts_and_no_account_of_the_stacks_writes_them(dev_foundation):
    grants = [
        g
        for g in dev_foundation["resource"]["google_storage_bucket_iam_member"].values()
        if g["bucket"].startswith("${google_storage_bucket.artifacts_bucket")
    ]  # not state, not access logs
    context = "_cloudbuild/0123456789abcdef.tgz"
    writers = [g for g in grants if allowed([g], WRITE_ROLES, context)]
    assert writers == []  # operators write it with their own roles (README)
    readers = [g["member"] for g in grants if allowed([g], READ_ROLES, context)]
    assert len(readers) == 1 and "google_service_account.builder_account" in readers[0]
    builder = storage_grants(dev_foundation, "builder_account")
    assert not allowed(builder, READ_ROLES, "fr/data/train.csv")


def test_the_resize_role_carries_what_the_stop_path_calls(dev_foundation):
    # trainer/launchers/vm/group.py (instanceGroupManagers.resize) and startup.sh's curl POST
    # .../resize: neither reads the group nor waits on the zone operation.
    (role,) = [
        r
        for r in dev_foundation["resource"]["google_project_iam_custom_role"].values()
        if r["role_id"] == "trainstackGroupResizer"
    ]
    assert role["permissions"] == ["compute.instanceGroupManagers.update"]


def test_trainer_resizes_only_its_environments_groups(dev_foundation):
    members = dev_foundation["resource"]["google_project_iam_member"].values()
    (resizer,) = [m for m in members if "google_project_iam_custom_role.trainer_resize_role" in m["role"]]
    expression = resizer["condition"]["expression"]

    def may_resize(group: str, zone: str = "europe-west4-b") -> bool:
        return condition_holds(
            expression,
            "compute.googleapis.com/InstanceGroupManager",
            f"projects/p1/zones/{zone}/instanceGroupManagers/{group}",
        )

    assert may_resize("dev-train-fr") and may_resize("dev-train-de", zone="us-central1-a")
    assert not may_resize("prod-train-fr") and not may_resize("web-frontend") and not may_resize("x-dev-train-fr")
    # a request IAM gives no resource name (names not evaluated for the type): the stop path still works
    assert condition_holds(expression, "compute.googleapis.com/InstanceGroupManager", "")
