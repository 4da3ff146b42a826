"""Names of cloud resources, shared by the stacks, the CLI and the docs (no cdktf here)."""

from __future__ import annotations

TRAINER_SA = "trainstack-trainer"
PLANNER_SA = "trainstack-ci-plan"
DEPLOYER_SA = "trainstack-ci-deploy"
BUILDER_SA = "trainstack-builder"
WIF_POOL = "trainstack-github"
WIF_PROVIDER = "github"
RESIZER_ROLE = "trainstackGroupResizer"
FOUNDATION = "foundation"


def sa_email(account_id: str, project: str) -> str:
    return f"{account_id}@{project}.iam.gserviceaccount.com"


def group_prefix(env: str) -> str:
    """What the names of an environment's groups start with: dev-train-."""
    return f"{env}-train-"


def group_name(env: str, lang: str) -> str:
    """The managed instance group (and VM base name) of a language's run: dev-train-fr."""
    return f"{group_prefix(env)}{lang}"


def node_tag(env: str) -> str:
    """The network tag of an environment's training VMs (the foundation's firewall rule lets them meet)."""
    return f"trainstack-{env}-trainer"


def node_firewall_name(env: str) -> str:
    return f"trainstack-{env}-trainer-nodes"


def stack_name(lang: str) -> str:
    """The training stack of a language (what `cdktf deploy` is given)."""
    return f"train-{lang}"


def state_prefix(env: str, stack: str) -> str:
    """Where a stack's Terraform state lives inside the state bucket."""
    return f"{env}/{stack}"
