"""Plan JSON that is safe to upload: values Terraform marks sensitive are replaced everywhere.

`terraform show -json` carries sensitive values in plain text (masks beside them, sensitive
variables in `variables`, the same values again in prior_state/planned_values). The plan
artifact of a pull request is readable by everyone who can read the repository.
"""

from __future__ import annotations

from stacks.plan_render.attributes import SENSITIVE, sensitive_values
from stacks.plan_render.parse import _change


def secrets_of(doc: dict) -> set[str]:
    found: set[str] = set()
    for key in ("resource_changes", "resource_drift"):
        for raw in doc.get(key) or ():
            found.update(sensitive_values(_change(raw)))
    for oc in (doc.get("output_changes") or {}).values():
        for side in ("before", "after"):
            value, masked = oc.get(side), oc.get(f"{side}_sensitive")
            if masked and value is not None:
                found.update(_leaves(value))
    declared = ((doc.get("configuration") or {}).get("root_module") or {}).get("variables") or {}
    for name, value in (doc.get("variables") or {}).items():
        if (declared.get(name) or {}).get("sensitive"):
            found.update(_leaves(value.get("value")))
    return {s for s in found if len(s) >= 4}


def _leaves(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return [] if value is None or isinstance(value, bool) else [str(value)]


def redact(doc: dict) -> dict:
    """A copy of `doc` in which every sensitive string (and any string containing one) is masked."""
    secrets = sorted(secrets_of(doc), key=len, reverse=True)
    if not secrets:
        return doc

    def scrub(value):
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if isinstance(value, str):
            for secret in secrets:
                if secret in value:
                    value = value.replace(secret, SENSITIVE)
            return value
        if not isinstance(value, bool) and value is not None and str(value) in secrets:
            return SENSITIVE
        return value

    return scrub(doc)
