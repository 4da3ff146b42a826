"""CI: the WIF trust of the synthesized foundation on sample GitHub tokens, the deployer's rights,
workflow hygiene (actionlint, zizmor, pinning, permissions) and what the workflows rely on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.project import REPO, make_project

CI_SETS = ["ci.github_repository=acme/trainstack", "ci.github_repository_id=101", "ci.github_repository_owner_id=202"]


# --- a small CEL evaluator: the subset the foundation generates, and nothing else -----------------

TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>&&|\|\||==|!=|[!+(),\[\]])|(?P<id>[A-Za-z_][\w.]*))')


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text.rstrip()):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise SyntaxError(f"unsupported CEL at {text[pos : pos + 20]!r}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


def cel(text: str, assertion: dict[str, str]):
    """Evaluate `text` on a token's claims; a missing claim is an error (CEL denies), as in Google IAM."""
    tokens = tokenize(text)
    pos = 0

    def peek():
        return tokens[pos][1] if pos < len(tokens) else None

    def take(expected=None):
        nonlocal pos
        kind, value = tokens[pos]
        if expected is not None and value != expected:
            raise SyntaxError(f"expected {expected!r}, got {value!r}")
        pos += 1
        return kind, value

    def primary():
        kind, value = take()
        if kind == "str":
            return json.loads(value)
        if kind == "id":
            if value == "in":
                raise SyntaxError("misplaced in")
            root, _, claim = value.partition(".")
            if root != "assertion" or not claim:
                raise SyntaxError(f"unknown name {value}")
            return assertion[claim]
        if value == "(":
            result = disjunction()
            take(")")
            return result
        if value == "[":
            items = []
            while peek() != "]":
                items.append(disjunction())
                if peek() == ",":
                    take(",")
            take("]")
            return items
        raise SyntaxError(f"unexpected {value!r}")

    def unary():
        if peek() == "!":
            take("!")
            return not unary()
        return primary()

    def concat():
        value = unary()
        while peek() == "+":
            take("+")
            value = value + unary()
        return value

    def relation():
        left = concat()
        op = peek()
        if op in ("==", "!=", "in"):
            take()
            right = concat()
            return left == right if op == "==" else left != right if op == "!=" else left in right
        return left

    def conjunction():
        value = relation()
        while peek() == "&&":
            take("&&")
            right = relation()
            value = value and right
        return value

    def disjunction():
        value = conjunction()
        while peek() == "||":
            take("||")
            right = conjunction()
            value = value or right
        return value

    result = disjunction()
    if pos != len(tokens):
        raise SyntaxError(f"trailing {tokens[pos:]}")
    return result


def test_the_evaluator_is_not_vacuous():
    claims = {"a": "x", "b": "y"}
    assert cel('assertion.a == "x" && (assertion.b == "z" || assertion.b in ["y"])', claims) is True
    assert cel('assertion.a + ":" + assertion.b == "x:y" && !(assertion.a != "x")', claims) is True
    assert cel('assertion.a == "x" && assertion.b == "z"', claims) is False
    with pytest.raises(KeyError):
        cel('assertion.missing == "x"', claims)
    with pytest.raises(SyntaxError):
        cel('assertion.a == "x" ? true : false', claims)


# --- the synthesized foundation on sample tokens ---------------------------------------------------

# en on two nodes: the placement policy and per-instance configs are synthesized too.
MULTI_NODE = ["languages.en.nodes=2", "languages.en.gcp.machine_type=g2-standard-24", "languages.en.gcp.gpu.count=2"]


@pytest.fixture(scope="module")
def synthesized_dev(tmp_path_factory) -> Path:
    import os

    from stacks.cli.main import app

    root = make_project(tmp_path_factory.mktemp("wif") / "proj")
    cwd = Path.cwd()
    os.chdir(root)
    try:
        args = [
            "synth",
            "--env",
            "dev",
            "--set",
            "gcp.project=p1",
            *(a for s in [*CI_SETS, *MULTI_NODE] for a in ("--set", s)),
        ]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    finally:
        os.chdir(cwd)
    return root / "cdktf.out" / "stacks"


@pytest.fixture(scope="module")
def foundation(synthesized_dev) -> dict:
    return json.loads((synthesized_dev / "foundation" / "cdk.tf.json").read_text())


def admitted(doc: dict, claims: dict[str, str]) -> set[str]:
    """The CI accounts a GitHub token may impersonate: provider condition, mapping, then bindings."""
    (provider,) = doc["resource"]["google_iam_workload_identity_pool_provider"].values()
    try:
        if cel(provider["attribute_condition"], claims) is not True:
            return set()
        attributes = {k.removeprefix("attribute."): cel(v, claims) for k, v in provider["attribute_mapping"].items()}
    except KeyError:  # a claim the token lacks: the expression errors and Google rejects the token
        return set()
    accounts = set()
    for binding in doc["resource"]["google_service_account_iam_member"].values():
        if binding["role"] != "roles/iam.workloadIdentityUser":
            continue
        m = re.fullmatch(r"principalSet://iam\.googleapis\.com/\$\{[\w.]+\}/attribute\.(\w+)/(.+)", binding["member"])
        assert m, binding["member"]  # no principalSet form the evaluator does not understand
        if attributes.get(m.group(1)) == m.group(2):
            accounts.add("planner" if "planner" in binding["service_account_id"] else "deployer")
    return accounts


def token(
    event: str,
    ref: str,
    *,
    repository_id: str = "101",
    owner_id: str = "202",
    repository: str = "acme/trainstack",
    environment: str | None = None,
) -> dict[str, str]:
    sub = (
        f"repo:{repository}:environment:{environment}"
        if environment
        else (f"repo:{repository}:pull_request" if event == "pull_request" else f"repo:{repository}:ref:{ref}")
    )
    return {
        "sub": sub,
        "repository": repository,
        "repository_id": repository_id,
        "repository_owner": "acme",
        "repository_owner_id": owner_id,
        "event_name": event,
        "ref": ref,
        "actor": "someone",
    }


@pytest.mark.parametrize(
    "claims, accounts",
    [
        (token("push", "refs/heads/main"), {"deployer"}),
        (token("push", "refs/heads/main", environment="dev"), {"deployer"}),  # deploy jobs use GitHub environments
        (token("workflow_dispatch", "refs/heads/main"), {"deployer"}),
        (token("schedule", "refs/heads/main"), {"deployer"}),
        (token("pull_request", "refs/pull/7/merge"), {"planner"}),
        # Runs a fork author can start with main's context get nothing.
        (token("pull_request_target", "refs/heads/main"), set()),
        (token("workflow_run", "refs/heads/main"), set()),
        (token("issue_comment", "refs/heads/main"), set()),
        (token("push", "refs/heads/feature"), set()),
        (token("workflow_dispatch", "refs/heads/feature"), set()),
        # Same name, another repository (renamed, deleted and re-created, transferred): ids differ.
        (token("push", "refs/heads/main", repository_id="999"), set()),
        (token("push", "refs/heads/main", owner_id="999"), set()),
        (
            token("pull_request", "refs/pull/7/merge", repository="other/repo", repository_id="303", owner_id="404"),
            set(),
        ),
    ],
)
def test_wif_admits_only_the_configured_repository_and_events(foundation, claims, accounts):
    assert admitted(foundation, claims) == accounts


def test_token_without_repository_id_is_refused(foundation):
    claims = token("push", "refs/heads/main")
    del claims["repository_id"]
    assert admitted(foundation, claims) == set()


def test_foundation_without_repository_stops_with_exit_2(project):
    from stacks.cli.main import app

    result = CliRunner().invoke(app, ["synth", "--env", "dev", "--set", "gcp.project=p1"])
    assert result.exit_code == 2
    assert "ci.github_repository, ci.github_repository_id, ci.github_repository_owner_id not set" in result.output
    assert "envs/dev.yaml" in result.output and "gh api repos/OWNER/NAME" in result.output
    # Configuration that does not synthesize the foundation still works without it.
    assert CliRunner().invoke(app, ["config", "show", "--env", "prod", "--set", "gcp.project=p1"]).exit_code == 0


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_no_repository_ships_trusted(env):
    import yaml

    doc = yaml.safe_load((REPO / "envs" / f"{env}.yaml").read_text())
    assert "ci" not in doc or not (doc["ci"] or {}).get("github_repository")


# --- workflow hygiene ------------------------------------------------------------------------------

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
LINT_BIN = REPO / ".venv-lint" / "bin"
# The first major of each action that runs on node24 (node20 is retired on hosted runners).
PINS_FILE = REPO / ".github" / "action-pins.yaml"


def vouched_pins() -> dict[str, dict[str, dict]]:
    """action -> sha -> {tag, sha, runtime}, from the verified pins file."""
    import yaml

    doc = yaml.safe_load(PINS_FILE.read_text())
    assert str(doc["read_on"]) and doc["actions"]
    return {action: {pin["sha"]: pin for pin in pins} for action, pins in doc["actions"].items()}


def load_workflow(path: Path) -> dict:
    import yaml

    doc = yaml.safe_load(path.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def lint_tool(name: str) -> Path:
    exe = LINT_BIN / name
    if not exe.is_file():
        pytest.fail(f"{name} not found at {exe}: run `make setup` (requirements-lint.txt)", pytrace=False)
    return exe


def test_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "plan.yml", "deploy.yml", "gc.yml"}


def test_actionlint_finds_nothing():
    import subprocess

    proc = subprocess.run(
        [str(lint_tool("actionlint")), "-no-color", *map(str, WORKFLOWS)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_finds_nothing():
    import subprocess

    proc = subprocess.run(
        [str(lint_tool("zizmor")), "--offline", "--format", "json", str(REPO / ".github" / "workflows")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = json.loads(proc.stdout or "[]")
    assert findings == [], json.dumps([(f["ident"], f["desc"]) for f in findings], indent=1)
    assert proc.returncode == 0, proc.stderr


def steps(doc: dict):
    for job_name, job in doc["jobs"].items():
        for step in job.get("steps", []):
            yield job_name, job, step


def pin_problems(text: str) -> list[str]:
    """Every `uses:` of a workflow that is not a SHA pin vouched for, with its tag, by the pins file."""
    uses = re.findall(r"uses:\s*([\w./-]+)@(\S+)(?:[ \t]*#[ \t]*(\S+))?", text)
    pins, problems = vouched_pins(), [] if uses else ["no `uses:` found"]
    for action, ref, tag in uses:
        pin = pins.get(action, {}).get(ref)
        if not re.fullmatch(r"[0-9a-f]{40}", ref):
            problems.append(f"{action}@{ref} is not pinned by commit SHA")
        elif pin is None:
            problems.append(f"{action}@{ref} is not vouched for by {PINS_FILE.name}")
        elif tag != pin["tag"]:
            problems.append(f"{action}@{ref} says {tag or 'no tag'}; {PINS_FILE.name} has {pin['tag']}")
        elif pin["runtime"] != "node24":
            problems.append(f"{action} {pin['tag']} runs on {pin['runtime']}, a retired runtime")
    return problems


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_pinned_by_a_vouched_sha_and_tag_on_node24(path):
    assert pin_problems(path.read_text()) == []


def test_pin_check_refuses_unvouched_shas_wrong_tags_and_branches():
    good = "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1"
    assert pin_problems(f"- uses: {good} # v7.0.1") == []
    assert (
        "not vouched"
        in pin_problems("- uses: actions/upload-artifact@043fb46d1a93c77aae656e7c1c64a875d1fc6a0a # v7.0.1")[0]
    )
    assert "says v7.0.2" in pin_problems(f"- uses: {good} # v7.0.2")[0]
    assert "says no tag" in pin_problems(f"- uses: {good}")[0]
    assert "not pinned by commit SHA" in pin_problems("- uses: actions/checkout@v7")[0]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_and_no_template_in_shell(path):
    doc = load_workflow(path)
    assert doc["permissions"] == {}, "workflow-level permissions must be empty; jobs ask for what they use"
    for name, job in doc["jobs"].items():
        assert "permissions" in job, f"job {name} declares no permissions"
        assert set(job["permissions"].values()) <= {"read", "write"}
    for job_name, _, step in steps(doc):
        if "actions/checkout@" in step.get("uses", ""):
            assert step["with"]["persist-credentials"] is False, f"{job_name}: checkout keeps the token"
        assert "${{" not in step.get("run", ""), f"{job_name}: template expansion inside a shell script"


def test_plan_workflow_comments_once_also_on_failure_and_never_for_forks():
    doc = load_workflow(REPO / ".github" / "workflows" / "plan.yml")
    assert set(doc["on"]) == {"pull_request"}  # never pull_request_target
    plan, review = doc["jobs"]["plan"], doc["jobs"]["review"]
    assert plan["strategy"]["fail-fast"] is False and "matrix" in plan["strategy"]
    assert "id-token" not in review["permissions"] and review["permissions"]["pull-requests"] == "write"
    assert "pull-requests" not in plan["permissions"]
    assert review["if"] == "always()" and review["needs"] == ["envs", "plan"]
    upload = next(s for s in plan["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"
    comment = next(s for s in review["steps"] if "github_comment" in s.get("run", ""))
    assert comment["if"] == (
        "github.event.pull_request.head.repo.full_name == github.repository && github.actor != 'dependabot[bot]'"
    )
    summary = next(s for s in review["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert "if" not in summary  # forks get the review in the job summary
    envs_run = doc["jobs"]["envs"]["steps"][-1]["run"]
    assert '"$HEAD_REPOSITORY" != "$GITHUB_REPOSITORY"' in envs_run and "--no-credentials" in envs_run
    # Issue 38: Dependabot's pull requests get no OIDC token either (treated like a fork's).
    assert '[ "$GITHUB_ACTOR" = "dependabot[bot]" ]' in envs_run
    plan_run = next(s for s in plan["steps"] if s.get("name") == "Plan")["run"]
    assert '[ "$status" -ne 4 ]' in plan_run  # changes present is not a failure


def test_deploy_workflow_applies_only_the_reviewed_plan_from_main():
    doc = load_workflow(REPO / ".github" / "workflows" / "deploy.yml")
    assert doc["on"] == {"push": {"branches": ["main"]}, "workflow_dispatch": None}
    deploy = doc["jobs"]["deploy"]
    assert deploy["environment"] == "${{ matrix.env }}"
    assert deploy["permissions"]["id-token"] == "write" and deploy["permissions"].get("contents") == "read"
    assert doc["concurrency"]["cancel-in-progress"] is False
    runs = [s.get("run", "") for s in deploy["steps"]]
    assert any("trainctl apply --reviewed reviewed" in r for r in runs)
    assert not any("terraform apply" in r or "cdktf deploy" in r for r in runs)


def test_gc_workflow_runs_daily_as_the_deployer_with_a_summary():
    doc = load_workflow(REPO / ".github" / "workflows" / "gc.yml")
    assert "schedule" in doc["on"]
    run = doc["jobs"]["gc"]["steps"][-1]["run"]
    assert "trainctl gc" in run and '--summary "$GITHUB_STEP_SUMMARY"' in run


# --- the environment matrix ------------------------------------------------------------------------


def test_matrix_lists_local_and_configured_gcp_envs():
    from stacks.plan_render.ci_matrix import matrix

    variables = {
        "GCP_PROJECT_DEV": "p-dev",
        "GCP_WIF_PROVIDER_DEV": "projects/1/x",
        "GCP_PLANNER_DEV": "plan@p",
        "GCP_DEPLOYER_DEV": "deploy@p",
        "GCP_PROJECT_PROD": "p-prod",
    }  # prod: not wired yet
    planner = matrix(variables, "planner", local=True, credentials=True)
    assert [r["env"] for r in planner] == ["local", "dev"] and planner[1]["account"] == "plan@p"
    assert matrix(variables, "deployer", local=False, credentials=True) == [
        {"env": "dev", "project": "p-dev", "provider": "projects/1/x", "account": "deploy@p"}
    ]
    assert [r["env"] for r in matrix(variables, "planner", local=True, credentials=False)] == ["local"]


# --- the deployer: a custom role instead of compute.instanceAdmin.v1, its env's states only -------


def deployer_grants(doc: dict, kind: str) -> list[dict]:
    return [g for g in doc["resource"].get(kind, {}).values() if "google_service_account.ci_deployer" in g["member"]]


def test_deployer_compute_rights_are_a_custom_role_covering_the_training_stacks(foundation, synthesized_dev):
    from stacks.targets.gcp.iam_grants import DEPLOYER_PERMISSIONS

    roles = {g["role"] for g in deployer_grants(foundation, "google_project_iam_member")}
    assert not any("compute." in r or r.endswith(("admin", "Admin", "editor", "owner")) for r in roles), roles
    (custom,) = [
        r
        for r in foundation["resource"]["google_project_iam_custom_role"].values()
        if r["role_id"] == "trainstackDeployer"
    ]
    assert any(r.startswith("${google_project_iam_custom_role.") for r in roles)
    permissions = set(custom["permissions"])
    assert permissions == set(DEPLOYER_PERMISSIONS)
    assert not {
        p
        for p in permissions
        if p.startswith(("compute.instances.", "compute.disks.", "compute.snapshots."))
        or p.endswith(("setIamPolicy", ".setMetadata"))
    }
    # Every Compute resource type of the synthesized training stacks can be created, read and deleted.
    collection = {
        "google_compute_instance_template": "instanceTemplates",
        "google_compute_instance_group_manager": "instanceGroupManagers",
        "google_compute_resource_policy": "resourcePolicies",
    }
    types = set()
    for stack in ("train-fr", "train-en"):
        types |= set(json.loads((synthesized_dev / stack / "cdk.tf.json").read_text())["resource"])
    compute_types = {t for t in types if t.startswith("google_compute_")}
    assert compute_types == {*collection, "google_compute_per_instance_config"}
    for kind, name in collection.items():
        assert {f"compute.{name}.{verb}" for verb in ("create", "get", "delete")} <= permissions, kind
    # Per-instance configs, template roll-outs: updates of the group; the template is used by it.
    assert {
        "compute.instanceGroupManagers.update",
        "compute.instanceTemplates.useReadOnly",
        "compute.resourcePolicies.use",
        "compute.subnetworks.use",
        "compute.zoneOperations.get",
    } <= permissions


def test_deployer_state_access_is_its_envs_training_stacks_only(foundation):
    from tests.support.iam_conditions import condition_holds

    (state,) = [
        g
        for g in deployer_grants(foundation, "google_storage_bucket_iam_member")
        if g["bucket"] == "p1-trainstack-tfstate"
    ]
    assert state["role"] == "roles/storage.objectUser"
    expression = state["condition"]["expression"]

    def may(name: str) -> bool:
        return condition_holds(
            expression, "storage.googleapis.com/Object", f"projects/_/buckets/p1-trainstack-tfstate/objects/{name}"
        )

    assert may("dev/train-fr/default.tfstate") and may("dev/train-en/default.tflock")
    for other in ("dev/foundation/default.tfstate", "prod/train-fr/default.tfstate", "dev/trainx", "train-fr/x"):
        assert not may(other), other
    assert condition_holds(expression, "storage.googleapis.com/Bucket", "projects/_/buckets/p1-trainstack-tfstate")


def test_deployer_reads_run_folders_only_for_gc(foundation):
    from tests.support.iam_conditions import condition_holds

    grants = [
        g
        for g in deployer_grants(foundation, "google_storage_bucket_iam_member")
        if g["bucket"] != "p1-trainstack-tfstate"
    ]
    assert grants and {g["role"] for g in grants} == {"roles/storage.objectViewer"}

    def may(name: str) -> bool:
        return any(
            condition_holds(
                g["condition"]["expression"],
                "storage.googleapis.com/Object",
                f"projects/_/buckets/trainstack-dev-artifacts/objects/{name}",
            )
            for g in grants
        )

    assert may("fr/runs/20261125-010000-ab12/status.json") and may("en/runs/r/log.txt")
    for other in ("fr/data/train.csv", "fr/lm/CURRENT", "_cloudbuild/x.tgz", "de/runs/r/status.json"):
        assert not may(other), other
    # Issue 38: objects.list (gc lists <run>/vm/) is checked on the bucket, not on an object.
    assert all(
        condition_holds(
            g["condition"]["expression"], "storage.googleapis.com/Bucket", "projects/_/buckets/trainstack-dev-artifacts"
        )
        for g in grants
    )


# --- trainctl gc --summary: what the daily workflow lists -------------------------------------------


def test_gc_summary_lists_destroyed_and_kept_stacks(project, tmp_path, monkeypatch):
    from stacks.cli.main import app
    from stacks.runs import stack_ops

    runs = {"fr": "20261125-010000-aaaa", "en": "20261125-020000-bbbb"}
    destroyed = []
    monkeypatch.setattr(stack_ops, "open_stack", lambda run: run)  # no synth: the stacks' runs are given here
    monkeypatch.setattr(stack_ops, "active_run", lambda run: runs[run.lang])
    monkeypatch.setattr(
        stack_ops, "live_state", lambda bucket, lang, run_id, target: "RUNNING" if lang == "en" else None
    )
    monkeypatch.setattr(stack_ops, "teardown", lambda run, reporter: destroyed.append(run.stack))
    summary = tmp_path / "summary.md"
    result = CliRunner().invoke(app, ["gc", "--summary", str(summary)])
    assert result.exit_code == 0, result.output
    assert destroyed == ["train-fr"] and "gc: destroyed 1 stack(s)" in result.output
    text = summary.read_text()
    assert "### trainctl gc: env `local`" in text and "- `train-fr` (run `20261125-010000-aaaa`)" in text
    assert "Kept (run still active):\n- `train-en` (run `20261125-020000-bbbb` is RUNNING)" in text
