"""The parts of the review that are never cut: verdict, count table, the destroy banner, runs' costs."""

from __future__ import annotations

import html
import re

from stacks.plan_render.attributes import SENSITIVE
from stacks.plan_render.parse import StackPlan

KINDS = ("create", "update", "replace", "delete", "no-op")


def code(text: str) -> str:
    """Inline code that no value can break out of (backticks, pipes, HTML)."""
    if "`" in text or "\n" in text or "|" in text or "<" in text:
        return "<code>" + html.escape(text.replace("\n", " ")).replace("|", "&#124;") + "</code>"
    return f"`{text}`"


def where(plan: StackPlan) -> str:
    return f"{code(plan.env)} · {code(plan.stack)}"


def where_html(plan: StackPlan) -> str:
    """`where()` for HTML contexts (a <summary> does not render Markdown)."""
    return f"<code>{html.escape(plan.env)}</code> · <code>{html.escape(plan.stack)}</code>"


def totals(plans: list[StackPlan]) -> dict[str, int]:
    return {k: sum(p.count(k) for p in plans) for k in KINDS}


def _counts_phrase(counts: dict[str, int], kinds=("create", "update", "replace", "delete")) -> str:
    return ", ".join(f"{counts[k]} to {k}" for k in kinds if counts[k]) or "no resource changes"


def verdict(plans: list[StackPlan]) -> str:
    t = totals(plans)
    envs = sorted({p.env for p in plans})
    scope = f"{len(plans)} stack{'s' * (len(plans) != 1)} in {len(envs)} environment{'s' * (len(envs) != 1)}"
    failed = [p for p in plans if p.error]
    outputs = sum(1 for p in plans for o in p.outputs if o.kind != "no-op")
    drift = sum(len(p.drift) for p in plans)
    extra = "".join(
        [
            f"; {outputs} output change{'s' * (outputs != 1)}" if outputs else "",
            f"; {drift} resource{'s' * (drift != 1)} drifted outside Terraform" if drift else "",
        ]
    )
    if failed:
        names = ", ".join(f"{p.env}/{p.stack}" for p in failed)
        return f"❌ **Plan failed** for {names}. Others: {_counts_phrase(t)}{extra} ({scope})."
    if t["delete"] or t["replace"]:
        return (
            f"⚠️ **Destroys resources**: {_counts_phrase(t, ('delete', 'replace'))}; "
            f"also {_counts_phrase(t, ('create', 'update'))}{extra} ({scope})."
        )
    if any(p.has_changes for p in plans):
        return f"🟡 **Changes**: {_counts_phrase(t)}{extra} ({scope})."
    return f"✅ **No changes** ({scope}){extra}."


def count_table(plans: list[StackPlan]) -> str:
    rows = ["| env | stack | create | update | replace | delete | no-op | |", "|---|---|--:|--:|--:|--:|--:|---|"]
    for p in plans:
        if p.error:
            status = "❌ plan failed"
        elif p.count("delete") or p.count("replace"):
            status = "⚠️ destroys"
        elif p.has_changes:
            status = "changes"
        else:
            status = "✅ no changes"
        if p.drift:
            status += f", {len(p.drift)} drifted"
        cells = ["–" if p.error else str(p.count(k) or "·") for k in KINDS]
        rows.append(f"| {code(p.env)} | {code(p.stack)} | " + " | ".join(cells) + f" | {status} |")
    return "\n".join(rows)


def banner_lines(plans: list[StackPlan]) -> list[str]:
    """One line per deleted or replaced resource, with why."""
    lines = []
    for p in plans:
        for c in p.changes:
            if c.kind not in ("delete", "replace"):
                continue
            why = []
            if c.replace_order:
                why.append(c.replace_order)
            if c.reason:
                why.append(c.reason)
            if c.replace_paths:
                paths = ", ".join(code(".".join(str(x) for x in path)) for path in c.replace_paths[:8])
                why.append(f"forced by {paths}")
            lines.append(f"> - **{c.kind}** {where(p)} {code(c.address)}" + (f" — {'; '.join(why)}" if why else ""))
    return lines


def banner(plans: list[StackPlan], max_chars: int, artifact: str) -> str:
    """The destroy banner, whole when it fits in `max_chars` (it nearly always does)."""
    lines = banner_lines(plans)
    if not lines:
        return ""
    head = (
        f"> [!CAUTION]\n> **{len(lines)} resource{'s' * (len(lines) != 1)} will be destroyed** "
        "(deleted, or replaced by a new one):"
    )
    kept, used = [], len(head)
    for n, line in enumerate(lines):
        if used + len(line) + 1 > max_chars - 200:
            kept.append(f"> - … and {len(lines) - n} more: see {artifact}")
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join([head, *kept])


def training_lines(plans: list[StackPlan]) -> list[str]:
    """Each training stack's machines and cost, as its target reads them from the plan."""
    from stacks.targets import by_name, registered

    lines = []
    for p in plans:
        if p.error:
            continue
        # the target recorded with the plan; a plan saved without one: whichever target recognises it
        names = [p.target] if p.target in registered() else registered()
        line = next((line for line in (by_name(name).plan_line(p) for name in names) if line), None)
        if line:
            lines.append(f"- {where(p)}: {line}")
    return lines


def error_block(plan: StackPlan, max_lines: int = 40) -> str:
    text = "\n".join((plan.error or "").strip().splitlines()[-max_lines:])
    # A fence longer than any run of backticks in the error, so the error cannot close it.
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return f"**{where(plan)}** failed:\n\n{fence}\n{text}\n{fence}"


def output_rows(plans: list[StackPlan]) -> list[str]:
    from stacks.plan_render.attributes import show

    rows = []
    for p in plans:
        for o in p.outputs:
            if o.kind == "no-op":
                continue
            before = SENSITIVE if o.before_sensitive else ("" if o.kind == "create" else show(o.before))
            after = (
                SENSITIVE if o.after_sensitive else "" if o.kind == "delete" else show(o.after, False, o.after_unknown)
            )
            rows.append(
                f"| {where(p)} | {code(o.name)} | {o.kind} | {code(before) if before else ''} | "
                f"{code(after) if after else ''} |"
            )
    return rows
