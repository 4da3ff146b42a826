"""A tiny evaluator of the storage IAM conditions (a CEL subset) the synthesized stacks grant with."""
from __future__ import annotations

import re

# The only grammar the stacks' storage conditions use; anything else fails the test rather than guessing.
CEL_TOKEN = re.compile(r'\s+|&&|\|\||\(|\)|==|resource\.type|resource\.name\.startsWith|"[^"\\]*"')


def condition_holds(expression: str | None, rtype: str, name: str) -> bool:
    """Evaluate a storage IAM condition for one resource (a tiny CEL subset; None = unconditional)."""
    if expression is None:
        return True
    python, pos = [], 0
    while pos < len(expression):
        match = CEL_TOKEN.match(expression, pos)
        assert match, f"condition outside the tested grammar at {expression[pos:pos + 40]!r}"
        token, pos = match.group(0), match.end()
        python.append({"&&": " and ", "||": " or ", "resource.type": "rtype",
                       "resource.name.startsWith": "name.startswith"}.get(token, token))
    return bool(eval("".join(python), {}, {"rtype": rtype, "name": name}))  # noqa: S307 (grammar checked above)
