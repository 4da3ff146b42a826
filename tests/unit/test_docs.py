"""The docs cannot rot silently: the map of docs/design.md matches the tree, relative links resolve."""
from __future__ import annotations

import re

from tests.support.project import REPO

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # [text](path) or [text](path#anchor)


def test_every_home_in_the_design_map_exists():
    text = (REPO / "docs" / "design.md").read_text()
    table = text[text.index("## The map"):text.index("## Environments")]
    homes = [p for row in table.splitlines() if row.startswith("| ") and "`" in row
             for p in re.findall(r"`([^`]+)`", row.split("|")[2])]
    assert len(homes) >= 15
    assert not [home for home in homes if not (REPO / home).exists()]


def test_relative_links_in_the_docs_resolve():
    docs = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    dead = []
    for doc in docs:
        for target in LINK.findall(doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (doc.parent / target).resolve()
            # outside the repository is dead in a user's clone (../shared is not there)
            if not path.is_relative_to(REPO) or not path.exists():
                dead.append(f"{doc.relative_to(REPO)} -> {target}")
    assert not dead, dead


def test_the_cli_reference_is_the_cli():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "docs" / "cli_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    rendered = reference.render()
    assert "## `trainctl train`" in rendered and "## `trainctl runs compare`" in rendered
    assert (REPO / "docs" / "cli.md").read_text() == rendered, \
        "docs/cli.md is not the CLI's: python docs/cli_reference.py > docs/cli.md"
