"""Read `terraform show -json` output into the few shapes the renderer needs.

Works on any plan JSON (no Terraform, no credentials). Which stack and environment a
file belongs to comes from its `trainstack` key (written by `trainctl plan --json-out`),
else from its path (`<env>/<stack>.json`), else from the file name alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from stacks.errors import ConfigError

# Terraform's `action_reason` codes, as a reviewer would say them.
REASONS = {
    "replace_because_tainted": "the object is tainted",
    "replace_because_cannot_update": "an attribute cannot be changed in place",
    "replace_by_request": "replacement requested (-replace)",
    "replace_by_triggers": "a replace_triggered_by reference changed",
    "delete_because_no_resource_config": "its configuration was removed",
    "delete_because_no_module": "its module was removed",
    "delete_because_wrong_repetition": "count/for_each changed form",
    "delete_because_count_index": "its count index is gone",
    "delete_because_each_key": "its for_each key is gone",
    "delete_because_no_move_target": "its moved target does not exist",
    "read_because_config_unknown": "its configuration is known only after apply",
    "read_because_dependency_pending": "a dependency has pending changes",
}


@dataclass(frozen=True)
class Change:
    """One resource's planned (or drifted) change, as Terraform's JSON `change` object holds it."""

    address: str
    type: str
    actions: tuple[str, ...]
    before: object
    after: object
    after_unknown: object = False
    before_sensitive: object = False
    after_sensitive: object = False
    replace_paths: tuple[tuple, ...] = ()
    action_reason: str | None = None
    mode: str = "managed"

    @property
    def kind(self) -> str:
        """create | update | replace | delete | read | no-op | forget, the way the summary counts it."""
        acts = set(self.actions)
        if {"create", "delete"} <= acts:
            return "replace"
        if acts & {"create", "update", "delete", "read", "forget"}:
            return next(a for a in ("create", "update", "delete", "read", "forget") if a in acts)
        return "no-op"

    @property
    def replace_order(self) -> str | None:
        if self.kind != "replace":
            return None
        return "create before destroy" if self.actions[0] == "create" else "destroy before create"

    @property
    def reason(self) -> str:
        return REASONS.get(self.action_reason or "", self.action_reason or "")


@dataclass(frozen=True)
class OutputChange:
    name: str
    actions: tuple[str, ...]
    before: object
    after: object
    after_unknown: bool = False
    before_sensitive: bool = False
    after_sensitive: bool = False

    @property
    def kind(self) -> str:
        return Change(self.name, "output", self.actions, None, None).kind


@dataclass
class StackPlan:
    """One stack's plan in one environment, or the error that stopped it (`error` set, no changes)."""

    env: str
    stack: str
    source: str
    changes: list[Change] = field(default_factory=list)
    drift: list[Change] = field(default_factory=list)
    outputs: list[OutputChange] = field(default_factory=list)
    error: str | None = None
    terraform_version: str = ""
    prices: dict | None = None  # the quote `plan` wrote with the plan (the target's quote_plan)
    target: str | None = None  # the env's target when planned (plans saved before it was recorded: None)

    def count(self, kind: str) -> int:
        return sum(1 for c in self.changes if c.kind == kind)

    @property
    def has_changes(self) -> bool:
        return any(c.kind not in ("no-op", "read") for c in self.changes) or any(
            o.kind != "no-op" for o in self.outputs
        )


def _change(raw: dict) -> Change:
    ch = raw.get("change") or {}
    return Change(
        address=raw.get("address", "?"),
        type=raw.get("type", ""),
        mode=raw.get("mode", "managed"),
        actions=tuple(ch.get("actions") or ("no-op",)),
        before=ch.get("before"),
        after=ch.get("after"),
        after_unknown=ch.get("after_unknown", False),
        before_sensitive=ch.get("before_sensitive", False),
        after_sensitive=ch.get("after_sensitive", False),
        replace_paths=tuple(tuple(p) for p in ch.get("replace_paths") or ()),
        action_reason=raw.get("action_reason"),
    )


def plan_from_document(doc: dict, *, env: str, stack: str, source: str) -> StackPlan:
    """A StackPlan from one parsed `terraform show -json` document."""
    meta = doc.get("trainstack") or {}
    plan = StackPlan(
        env=meta.get("env", env),
        stack=meta.get("stack", stack),
        source=source,
        error=meta.get("error"),
        terraform_version=doc.get("terraform_version", ""),
        prices=meta.get("prices") if isinstance(meta.get("prices"), dict) else None,
        target=meta.get("target") if isinstance(meta.get("target"), str) else None,
    )
    plan.changes = [_change(r) for r in doc.get("resource_changes") or () if r.get("mode", "managed") == "managed"]
    plan.drift = [_change(r) for r in doc.get("resource_drift") or ()]
    for name, oc in sorted((doc.get("output_changes") or {}).items()):
        plan.outputs.append(
            OutputChange(
                name,
                tuple(oc.get("actions") or ("no-op",)),
                oc.get("before"),
                oc.get("after"),
                bool(oc.get("after_unknown")),
                bool(oc.get("before_sensitive")),
                bool(oc.get("after_sensitive")),
            )
        )
    return plan


def names_from_path(path: Path) -> tuple[str, str]:
    """(env, stack) from `<env>/<stack>.json`; a file alone in the working folder has env '-'."""
    stack = path.name.removesuffix(".json")
    env = path.parent.name if path.parent.name not in ("", ".") else "-"
    return env, stack


BUNDLE_KEY = "trainstack_plans"  # `trainctl plan --json-out FILE.json` with several stacks: their documents


def read_plan_documents(path: Path) -> list[dict]:
    """The plan documents in one file: a `terraform show -json` document, or a bundle of them."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"no plan file {path}", hint="pass files written by `terraform show -json PLANFILE`"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path} is not JSON ({exc})",
            hint="pass the output of `terraform show -json PLANFILE`, not the plan file itself",
        ) from None
    docs = doc.get(BUNDLE_KEY) if isinstance(doc, dict) and isinstance(doc.get(BUNDLE_KEY), list) else [doc]
    for d in docs:
        if not isinstance(d, dict) or not ({"resource_changes", "format_version", "trainstack"} & set(d)):
            raise ConfigError(
                f"{path} is not a Terraform plan in JSON", hint="pass the output of `terraform show -json PLANFILE`"
            )
    return docs


def load_plan_file(path: Path) -> StackPlan:
    """The one plan in `path` (a bundle's first; see load_plan_files for all of them)."""
    return _plans_of(path)[0]


def _plans_of(path: Path) -> list[StackPlan]:
    env, stack = names_from_path(path)
    return [plan_from_document(doc, env=env, stack=stack, source=str(path)) for doc in read_plan_documents(path)]


def load_plan_files(paths: list[Path]) -> list[StackPlan]:
    """Every plan of every file (folders are searched for *.json), ordered by environment then stack."""
    files: list[Path] = []
    for p in paths:
        files += sorted(p.rglob("*.json")) if p.is_dir() else [p]
    if not files:
        raise ConfigError(
            "no plan JSON files found", hint="pass files or folders written by `trainctl plan --json-out`"
        )
    plans = [plan for f in files for plan in _plans_of(f)]
    return sorted(plans, key=lambda p: (p.env, p.stack != "foundation", p.stack))
