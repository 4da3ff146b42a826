"""Everything of one target stays in its package: outside stacks/targets/gcp/ no module imports it or a google
provider package, and no name in the code says gcp or google (the registry line excepted)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REGISTRY = "stacks/config/targets.py"
GOOGLE = re.compile(r"gcp|google", re.IGNORECASE)


def _outside_the_gcp_package():
    for path in sorted((REPO / "stacks").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if not rel.startswith("stacks/targets/gcp/") and rel != REGISTRY:
            yield rel, ast.parse(path.read_text(encoding="utf-8"))


def google_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if GOOGLE.search(alias.name)]
        elif isinstance(node, ast.ImportFrom) and GOOGLE.search(node.module or ""):
            found.append((node.lineno, node.module))
    return found


def gcp_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Identifiers that say gcp/google, and the target's name or bucket scheme as a literal."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            name = node.name
        elif isinstance(node, ast.Constant) and node.value in ("gcp", "gs"):
            found.append((node.lineno, node.value))
            continue
        else:
            continue
        if GOOGLE.search(name):
            found.append((node.lineno, name))
    return found


def test_no_module_outside_the_gcp_package_imports_it_or_a_google_provider():
    found = [f"{rel}:{line}: {m}" for rel, tree in _outside_the_gcp_package() for line, m in google_imports(tree)]
    assert not found, found


def test_no_code_outside_the_gcp_package_names_gcp():
    found = [f"{rel}:{line}: {n}" for rel, tree in _outside_the_gcp_package() for line, n in gcp_names(tree)]
    assert not found, found


def test_the_scans_find_a_planted_target_test_and_import():
    tree = ast.parse(
        'import cdktf_cdktf_provider_google\nif config.target == "gcp":\n'
        "    from stacks.targets.gcp.quota import choose_zone\n    gcp_zone = choose_zone(config)\n"
    )
    assert google_imports(tree) == [(1, "cdktf_cdktf_provider_google"), (3, "stacks.targets.gcp.quota")]
    assert sorted(gcp_names(tree)) == [(2, "gcp"), (4, "gcp_zone")]
