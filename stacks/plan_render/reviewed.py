"""Is the plan about to be applied the one that was reviewed?

Two `terraform show -json` documents (both redacted the same way) describe the same change
when every resource change (address, actions, before, after, what is unknown, what forces
replacement) and every output change are equal. Timestamps, Terraform's version and the
prior state's serial may differ.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def change_set(doc: dict) -> dict:
    changes = []
    for raw in doc.get("resource_changes") or ():
        change = raw.get("change") or {}
        actions = change.get("actions") or ["no-op"]
        if actions == ["no-op"]:
            continue
        changes.append(
            {k: change.get(k) for k in ("actions", "before", "after", "after_unknown", "replace_paths")}
            | {"address": raw.get("address")}
        )
    outputs = {
        name: {k: oc.get(k) for k in ("actions", "before", "after", "after_unknown")}
        for name, oc in (doc.get("output_changes") or {}).items()
        if oc.get("actions") != ["no-op"]
    }
    return {
        "resource_changes": sorted(changes, key=lambda c: c["address"] or ""),
        "output_changes": outputs,
        "error": (doc.get("trainstack") or {}).get("error"),
    }


def fingerprint(doc: dict) -> str:
    return hashlib.sha256(json.dumps(change_set(doc), sort_keys=True).encode()).hexdigest()


def differences(reviewed: dict, current: dict) -> list[str]:
    """Addresses (and output names) whose planned change is not the reviewed one."""
    old, new = change_set(reviewed), change_set(current)
    if old["error"]:
        return ["the reviewed plan failed"]
    by_address = tuple({c["address"]: c for c in side["resource_changes"]} for side in (old, new))
    found = sorted(a for a in set(by_address[0]) | set(by_address[1]) if by_address[0].get(a) != by_address[1].get(a))
    found += [
        f"output.{n}"
        for n in sorted(set(old["output_changes"]) | set(new["output_changes"]))
        if old["output_changes"].get(n) != new["output_changes"].get(n)
    ]
    return found


def reviewed_document(reviewed: Path, env: str, stack: str) -> dict | None:
    """The reviewed plan of `stack`: from a folder (`<env>/<stack>.json` as an artifact is downloaded,
    or `<stack>.json`), or from one file written by `plan --json-out FILE.json`."""
    from stacks.plan_render.parse import read_plan_documents

    if reviewed.is_file():
        docs = read_plan_documents(reviewed)
        found = [
            d
            for d in docs
            if (d.get("trainstack") or {}).get("stack") == stack
            and (d.get("trainstack") or {}).get("env") in (env, None)
        ]
        return found[0] if found else None
    for candidate in (reviewed / env / f"{stack}.json", reviewed / f"{stack}.json"):
        if candidate.is_file():
            return json.loads(candidate.read_text())
    return None
