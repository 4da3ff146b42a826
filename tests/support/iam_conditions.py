"""A tiny evaluator of the IAM conditions (a CEL subset) the synthesized stacks grant with."""

from __future__ import annotations

import re

# The only grammar the stacks' conditions use; anything else fails the test rather than guessing.
CEL_TOKEN = re.compile(
    r"\s+|&&|\|\||\(|\)|==|resource\.type|resource\.name\.startsWith|resource\.name\.extract|resource\.name\b|"
    r'\.startsWith|"[^"\\]*"'
)


def extract(name: str, template: str) -> str:
    """CEL's `resource.name.extract(template)`: the text after the first match of the part before
    `{var}`, up to the part after it (the end when none); "" when either is not found."""
    before, _, rest = template.partition("{")
    after = rest.partition("}")[2]
    start = name.find(before)
    if start < 0:
        return ""
    value = name[start + len(before) :]
    if not after:
        return value
    end = value.find(after)
    return value[:end] if end >= 0 else ""


def condition_holds(expression: str | None, rtype: str, name: str) -> bool:
    """Evaluate an IAM condition for one resource (a tiny CEL subset; None = unconditional)."""
    if expression is None:
        return True
    python, pos = [], 0
    while pos < len(expression):
        match = CEL_TOKEN.match(expression, pos)
        assert match, f"condition outside the tested grammar at {expression[pos : pos + 40]!r}"
        token, pos = match.group(0), match.end()
        python.append(
            {
                "&&": " and ",
                "||": " or ",
                "resource.type": "rtype",
                "resource.name.startsWith": "name.startswith",
                ".startsWith": ".startswith",
                "resource.name.extract": "name_extract",
                "resource.name": "name",
            }.get(token, token)
        )
    names = {"rtype": rtype, "name": name, "name_extract": lambda template: extract(name, template)}
    return bool(eval("".join(python), {}, names))  # noqa: S307 (grammar checked above)
