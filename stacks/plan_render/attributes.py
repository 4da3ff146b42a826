"""Attribute-level differences of one change, with sensitive values masked and long strings hashed.

Values are only ever shown through `show()`, which never prints a value whose sensitivity
mask is set, and prints a long or multi-line string (a start-up script) as its hash and
line count instead of its text.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass

from stacks.plan_render.parse import Change

SENSITIVE = "(sensitive)"
UNKNOWN = "(known after apply)"
LONG_STRING = 120  # characters; longer strings, and any with a newline, are summarised


@dataclass(frozen=True)
class AttributeChange:
    path: str
    op: str  # "+" added, "-" removed, "~" changed
    before: str
    after: str
    forces_replacement: bool = False


def _sub(mask: object, key: object) -> object:
    """The part of a sensitivity/unknown mask at `key` (a True mask covers everything below it)."""
    if mask is True:
        return True
    if isinstance(mask, dict):
        return mask.get(key, False)
    if isinstance(mask, list) and isinstance(key, int) and key < len(mask):
        return mask[key]
    return False


def _path(parts: tuple) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out and all(ch.isalnum() or ch in "_-" for ch in str(part)):
            out += f".{part}"
        elif out:
            out += f"[{json.dumps(part)}]"
        else:
            out = str(part)
    return out


def short_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:12]


def is_long(value: object) -> bool:
    return isinstance(value, str) and (len(value) > LONG_STRING or "\n" in value)


def show(value: object, sensitive: object = False, unknown: object = False) -> str:
    """One value as the comment shows it: masked, hashed or JSON."""
    if sensitive is True:
        return SENSITIVE
    if unknown is True:
        return UNKNOWN
    if is_long(value):
        return f"({len(value.splitlines())} lines, {len(value)} chars, {short_hash(value)})"
    if isinstance(value, (dict, list)) and _contains_sensitive(sensitive):
        return SENSITIVE  # a container with masked parts is never printed whole
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, (dict, list)) and (len(text) > 2 * LONG_STRING or any(map(is_long, _strings(value)))):
        return f"({type(value).__name__} of {len(value)} items, {len(text)} chars, {short_hash(text)})"
    return text


def _strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _contains_sensitive(mask: object) -> bool:
    if mask is True:
        return True
    if isinstance(mask, dict):
        return any(_contains_sensitive(v) for v in mask.values())
    if isinstance(mask, list):
        return any(_contains_sensitive(v) for v in mask)
    return False


def long_string_diff(before: str, after: str) -> str:
    """`12 → 14 lines (+3 −1), sha256:… → sha256:…`: how a start-up script changed, without its text."""
    old, new = before.splitlines(), after.splitlines()
    added = removed = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if op in ("replace", "delete"):
            removed += i2 - i1
        if op in ("replace", "insert"):
            added += j2 - j1
    return f"{len(old)} → {len(new)} lines (+{added} −{removed}), {short_hash(before)} → {short_hash(after)}"


def _empty(value: object) -> bool:
    return value is None or value == [] or value == {}


def attribute_changes(change: Change, limit: int = 200) -> list[AttributeChange]:
    """The leaf attributes that differ between before and after (all set ones for a create)."""
    replace = {tuple(p) for p in change.replace_paths}
    found: list[AttributeChange] = []

    def walk(parts: tuple, before, after, bsens, asens, unknown) -> None:
        if len(found) >= limit:
            return
        leaf_b = not isinstance(before, (dict, list)) or bsens is True
        leaf_a = not isinstance(after, (dict, list)) or asens is True or unknown is True
        if not (leaf_b and leaf_a) and type(before) is type(after) and isinstance(after, (dict, list)):
            # Attributes known only after apply are absent from `after`, present in the unknown mask.
            keys = (
                sorted(set(before) | set(after) | (set(unknown) if isinstance(unknown, dict) else set()))
                if isinstance(after, dict)
                else range(max(len(before), len(after)))
            )
            for key in keys:
                b = before.get(key) if isinstance(before, dict) else (before[key] if key < len(before) else None)
                a = after.get(key) if isinstance(after, dict) else (after[key] if key < len(after) else None)
                walk(parts + (key,), b, a, _sub(bsens, key), _sub(asens, key), _sub(unknown, key))
            return
        if not (leaf_b and leaf_a) and _empty(before) and isinstance(after, (dict, list)) and asens is not True:
            # A block that appears: list its set leaves one by one.
            extra = set(unknown) if isinstance(unknown, dict) and isinstance(after, dict) else set()
            for key in sorted(set(after) | extra) if isinstance(after, dict) else range(len(after)):
                value = after.get(key) if isinstance(after, dict) else after[key]
                walk(parts + (key,), None, value, False, _sub(asens, key), _sub(unknown, key))
            return
        if (
            not (leaf_b and leaf_a)
            and _empty(after)
            and isinstance(before, (dict, list))
            and bsens is not True
            and unknown is not True
        ):
            # A block that disappears: its set leaves one by one.
            for key in sorted(before) if isinstance(before, dict) else range(len(before)):
                walk(parts + (key,), before[key], None, _sub(bsens, key), False, False)
            return
        if unknown is not True and before == after and bsens == asens:
            return
        if unknown is not True and _empty(before) and _empty(after):
            return
        forces = any(parts[: len(p)] == p for p in replace) if replace else False
        if bsens is True or asens is True:
            if before == after and unknown is not True:
                return
            has_after = not _empty(after) or unknown is True
            op = "~" if not _empty(before) and has_after else ("+" if _empty(before) else "-")
            found.append(
                AttributeChange(
                    _path(parts),
                    op,
                    SENSITIVE if not _empty(before) else "",
                    SENSITIVE if (not _empty(after) or unknown is True) else "",
                    forces,
                )
            )
            return
        if _empty(before):
            found.append(AttributeChange(_path(parts), "+", "", show(after, asens, unknown), forces))
        elif _empty(after) and unknown is not True:
            found.append(AttributeChange(_path(parts), "-", show(before, bsens), "", forces))
        elif is_long(before) and is_long(after) and unknown is not True:
            found.append(AttributeChange(_path(parts), "~", "", long_string_diff(before, after), forces))
        else:
            found.append(AttributeChange(_path(parts), "~", show(before, bsens), show(after, asens, unknown), forces))

    before = change.before if change.kind != "create" else None
    after = change.after if change.kind != "delete" else None
    walk(
        (),
        before if before is not None else {},
        after if after is not None else {},
        change.before_sensitive,
        change.after_sensitive,
        change.after_unknown,
    )
    return found


def sensitive_values(change: Change) -> list[str]:
    """Every string under a sensitivity mask (to scrub from the output as a last guard)."""
    out: list[str] = []

    def collect(value, mask) -> None:
        if mask is True:
            stack = [value]
            while stack:
                v = stack.pop()
                if isinstance(v, dict):
                    stack += list(v.values())
                elif isinstance(v, list):
                    stack += v
                elif v is not None and not isinstance(v, bool):
                    out.append(str(v))
        elif isinstance(value, dict) and isinstance(mask, dict):
            for k, v in value.items():
                collect(v, mask.get(k, False))
        elif isinstance(value, list) and isinstance(mask, list):
            for v, m in zip(value, mask):
                collect(v, m)

    collect(change.before, change.before_sensitive)
    collect(change.after, change.after_sensitive)
    return out
