"""docs/cli.md from the CLI itself: `python docs/cli_reference.py > docs/cli.md` (tests/unit/test_docs.py keeps
the two equal, so the reference cannot rot)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEADER = """# trainctl: every command

Generated from the CLI (`python docs/cli_reference.py > docs/cli.md`; a test fails when they differ).
`trainctl --debug COMMAND` shows tracebacks and Terraform's output.

| exit status | meaning |
|---|---|
| 0 | success |
| 1 | the run failed (its status says why) |
| 2 | bad usage, config or input |
| 3 | infrastructure: Terraform, quota, a cloud API, VM creation |
| 4 | `trainctl plan` only: the plan has changes |
| 130 | interrupted (Ctrl-C) |
"""


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\\\|")


def _commands(cmd, path: list[str]):
    subs = getattr(cmd, "commands", None)  # typer's own click: a group has `commands`
    if not subs or (cmd.callback is not None and cmd.params and path != ["trainctl"]):
        yield path, cmd
    for name in sorted(subs or {}):
        yield from _commands(subs[name], [*path, name])


def render() -> str:
    import typer

    from stacks.cli.main import app

    out = [HEADER]
    for path, cmd in _commands(typer.main.get_command(app), ["trainctl"]):
        if len(path) == 1:
            continue
        out.append(f"## `{' '.join(path)}`\n")
        out.append(" ".join((cmd.help or "").strip().split("\n\n")[0].split()) + "\n")
        rows = [p for p in cmd.params if not getattr(p, "hidden", False)]
        if rows:
            out.append("| argument / option | what |\n|---|---|")
            for p in rows:
                name = " / ".join(p.opts) if p.param_type_name == "option" else p.name.upper()
                out.append(f"| `{name}` | {_cell(getattr(p, 'help', None))} |")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
