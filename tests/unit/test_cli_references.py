"""Every `trainctl COMMAND [SUBCOMMAND]` the code tells a user to run exists (a hint once named `trainctl data
check`, which never existed)."""

from __future__ import annotations

import re

import typer

from stacks.cli.main import app
from tests.support.project import REPO

MENTION = re.compile(r"[`(]trainctl ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")  # `trainctl x y` or (trainctl x y)
PROSE = {"always", "maps", "renders"}  # "(trainctl always sets it)": a sentence, not a command


def command_tree() -> dict[str, set[str] | None]:
    root = typer.main.get_command(app)
    # typer's own click: groups are told by their `commands`
    return {name: set(cmd.commands) if hasattr(cmd, "commands") else None for name, cmd in root.commands.items()}


def test_every_command_the_code_mentions_exists():
    tree = command_tree()
    wrong = []
    for path in [*(REPO / "stacks").rglob("*.py"), *(REPO / "trainer").rglob("*.py")]:
        for first, second in MENTION.findall(path.read_text()):
            if first in PROSE:
                continue
            if first not in tree:
                wrong.append(f"{path.relative_to(REPO)}: trainctl {first}")
            elif tree[first] is not None and second and second not in tree[first] and second not in ("--help",):
                wrong.append(f"{path.relative_to(REPO)}: trainctl {first} {second}")
    assert tree["data"] and tree["lm"] and not wrong, wrong
