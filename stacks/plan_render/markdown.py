"""Assemble the review comment within GitHub's size limit.

Verdict, count table, destroy banner, run costs and errors always stay; drift, outputs and
each stack's attribute-level detail are added while they fit, then shortened to an address
list, then to one line that points at the plan artifact.
"""

from __future__ import annotations

from typing import Callable

from stacks.plan_render.attributes import SENSITIVE, attribute_changes, sensitive_values
from stacks.plan_render.parse import Change, StackPlan
from stacks.plan_render.summary import (
    banner,
    count_table,
    error_block,
    output_rows,
    training_lines,
    verdict,
    where,
    where_html,
)

GITHUB_COMMENT_LIMIT = 65_536
# Room left for the sticky comment's marker and footer.
DEFAULT_BUDGET = GITHUB_COMMENT_LIMIT - 2_536
DEFAULT_ARTIFACT = "the plan JSON files (`trainctl plan --json-out`)"
SYMBOL = {"create": "+", "delete": "-", "update": "~", "replace": "!", "read": "<=", "forget": "x"}


def _resource_lines(change: Change, with_attributes: bool) -> list[str]:
    head = f"{SYMBOL.get(change.kind, ' ')} {change.kind:<7} {change.address}"
    notes = [n for n in (change.replace_order, change.reason) if n]
    if notes:
        head += f"   # {'; '.join(notes)}"
    if not with_attributes or change.kind == "delete":
        return [head]
    lines = [head]
    for a in attribute_changes(change):
        value = f"{a.before} -> {a.after}" if a.op == "~" and a.before else a.after if a.op != "-" else a.before
        lines.append(f"{a.op}     {a.path} = {value}" + ("   # forces replacement" if a.forces_replacement else ""))
    return lines


def _fenced(lines: list[str], lang: str = "diff") -> str:
    # Every line starts with a symbol, so no value can close the fence.
    return f"```{lang}\n" + "\n".join(lines) + "\n```"


def _summary_phrase(plan: StackPlan) -> str:
    parts = [f"{plan.count(k)} to {k}" for k in ("create", "update", "replace", "delete") if plan.count(k)]
    outputs = sum(1 for o in plan.outputs if o.kind != "no-op")
    if outputs:
        parts.append(f"{outputs} output change{'s' * (outputs != 1)}")
    return ", ".join(parts) or "no changes"


def stack_section(plan: StackPlan, limit: int, artifact: str) -> tuple[str, bool]:
    """(`<details>` of one stack within `limit` chars, whether it is complete)."""
    changed = [c for c in plan.changes if c.kind not in ("no-op", "read")]
    # Destroys first: a reviewer reads them before the (usually many) creates.
    changed.sort(key=lambda c: ({"delete": 0, "replace": 1, "update": 2}.get(c.kind, 3), c.address))
    opened = f"<details><summary><b>{where_html(plan)}</b>: {_summary_phrase(plan)}</summary>\n\n"
    closing = "\n</details>"
    full = opened + _fenced([ln for c in changed for ln in _resource_lines(c, True)]) + closing
    if len(full) <= limit:
        return full, True
    note = f"\n\nAttribute-level detail cut to fit the comment: see {artifact}."
    lines, room = [], limit - len(opened) - len(closing) - len(note) - 120
    for n, change in enumerate(changed):
        line = _resource_lines(change, False)[0]
        if room - len(line) - 1 < 0:
            lines.append(f"# … and {len(changed) - n} more")
            break
        lines.append(line)
        room -= len(line) + 1
    short = opened + _fenced(lines) + note + closing
    if lines and len(short) <= limit:
        return short, False
    return one_line(plan, artifact), False


def one_line(plan: StackPlan, artifact: str) -> str:
    return f"- {where(plan)}: {_summary_phrase(plan)} (detail cut to fit: see {artifact})"


def drift_section(plans: list[StackPlan], limit: int, artifact: str) -> tuple[str, bool]:
    drifted = [(p, c) for p in plans for c in p.drift]
    if not drifted:
        return "", True
    head = (
        "### Changed outside Terraform (drift)\n\n"
        "The last refresh found these objects changed since the last apply:\n\n"
    )
    full = head + "\n\n".join(f"{where(p)}\n\n" + _fenced(_resource_lines(c, True)) for p, c in drifted)
    if len(full) <= limit:
        return full, True
    short = head + "\n".join(f"- {where(p)} `{c.address}` ({c.kind})" for p, c in drifted)
    if len(short) <= limit:
        return short, False
    return f"### Changed outside Terraform (drift)\n\n{len(drifted)} objects drifted: see {artifact}.", False


def outputs_section(plans: list[StackPlan], limit: int, artifact: str) -> tuple[str, bool]:
    rows = output_rows(plans)
    if not rows:
        return "", True
    text = (
        "### Output changes\n\n| env · stack | output | change | before | after |\n|---|---|---|---|---|\n"
        + "\n".join(rows)
    )
    if len(text) <= limit:
        return text, True
    return f"### Output changes\n\n{len(rows)} outputs change: see {artifact}.", False


def _scrub(text: str, plans: list[StackPlan]) -> str:
    """Last guard: no string Terraform marked sensitive survives, whatever path printed it."""
    secrets = {s for p in plans for c in (*p.changes, *p.drift) for s in sensitive_values(c) if len(s) >= 4}
    secrets |= {
        str(v)
        for p in plans
        for o in p.outputs
        for v, masked in ((o.before, o.before_sensitive), (o.after, o.after_sensitive))
        if masked and v is not None and len(str(v)) >= 4
    }
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, SENSITIVE)
    return text


def render_markdown(
    plans: list[StackPlan],
    *,
    budget: int = DEFAULT_BUDGET,
    artifact: str = DEFAULT_ARTIFACT,
    title: str = "Terraform plan review",
) -> str:
    """The whole review, at most `budget` characters."""
    fixed = [f"## {title}", verdict(plans), count_table(plans)]
    used = sum(len(p) + 2 for p in fixed)
    destroy = banner(plans, budget - used - 4_000, artifact)
    if destroy:
        fixed.append(destroy)
    runs = training_lines(plans)
    if runs:
        fixed.append("**Training runs** (estimated cost of one run):\n\n" + "\n".join(runs))
    for p in plans:
        if p.error:
            fixed.append(error_block(p))
    unchanged = [p for p in plans if not p.error and not p.has_changes]
    if unchanged:
        fixed.append("No changes: " + ", ".join(where(p) for p in unchanged) + ".")
    cut_note = f"_Detail was cut to stay under GitHub's {GITHUB_COMMENT_LIMIT:,}-character limit: see {artifact}._"

    # Stacks that destroy something get the first claim on the budget (and come first).
    changed = sorted(
        (p for p in plans if not p.error and p.has_changes), key=lambda p: not (p.count("delete") or p.count("replace"))
    )
    heading = "### Changes per stack" if changed else ""
    optional: list[tuple[Callable[[int], tuple[str, bool]], str]] = [
        (lambda lim: drift_section(plans, lim, artifact), "### Changed outside Terraform (drift): see artifact"),
        (lambda lim: outputs_section(plans, lim, artifact), "### Output changes: see artifact"),
        *((lambda lim, p=p: stack_section(p, lim, artifact), one_line(p, artifact)) for p in changed),
    ]
    remaining = budget - sum(len(p) + 2 for p in fixed) - len(heading) - len(cut_note) - 4
    reserve = sum(len(short) + 2 for _, short in optional)
    parts, complete = [], True
    for n, (build, short) in enumerate(optional):
        reserve -= len(short) + 2
        text, whole = build(max(remaining - reserve, 0))
        if len(text) > remaining - reserve:
            text, whole = short, False
        complete &= whole
        if n == 2 and heading:
            parts.append(heading)
        if text:
            parts.append(text)
            remaining -= len(text) + 2
    body = "\n\n".join([*fixed, *parts] + ([] if complete else [cut_note]))
    return _scrub(body, plans) + "\n"
