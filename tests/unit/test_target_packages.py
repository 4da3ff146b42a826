"""Everything of one target stays in its packages: for every target of the registry, no module outside its package
(stacks/targets/<name>/) and its launcher (trainer/launchers/<x>/) imports them or names their modules, so targets
do not import each other either (today's exceptions listed below); outside stacks/targets/gcp/ no module imports a
google provider package and no name in the code says gcp or google (the registry line excepted)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from stacks.config.targets import TARGETS

REPO = Path(__file__).resolve().parents[2]
REGISTRY = "stacks/config/targets.py"
GOOGLE = re.compile(r"gcp|google", re.IGNORECASE)

# (module, the other target's module it uses): why, for an exception someone has to make (none today: a line goes
# when its import does, and a test says so).
ALLOWED: dict[tuple[str, str], str] = {}
# A module path in a string of code (`python -m trainer.launchers.vm`, importlib): a use, as an import is.
MODULE_IN_TEXT = re.compile(r"\b(?:stacks|trainer)(?:\.\w+)+")


@functools.cache
def parsed(path: Path) -> ast.AST:
    """A module's tree, parsed once for all the scans of this file (read, never changed)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _outside_the_gcp_package():
    for path in sorted((REPO / "stacks").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if not rel.startswith("stacks/targets/gcp/") and rel != REGISTRY:
            yield rel, parsed(path)


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


def target_packages() -> dict[str, str]:
    """package -> the target owning it: the package of its registry line's code, and its launcher."""
    owners = {}
    for name, entry in TARGETS.items():
        owners[entry.code.split(":")[0].rsplit(".", 1)[0]] = name
        if entry.launcher:
            owners[entry.launcher] = name
    return owners


def owner_of(module: str, owners: dict[str, str]) -> str | None:
    return next((t for pkg, t in owners.items() if module == pkg or module.startswith(pkg + ".")), None)


def uses_of_other_targets(module: str, tree: ast.AST, owners: dict[str, str]) -> list[tuple[int, str]]:
    """(line, name) of every import at any depth (TYPE_CHECKING ones too: still a dependency on the package) and
    every module path in a string of code (docstrings left out) of a target package that is not `module`'s."""
    here = owner_of(module, owners)
    found, docstrings = [], set()
    for node in ast.walk(tree):  # a statement before what it holds
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docstrings.add(id(node.value))
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            names = MODULE_IN_TEXT.findall(node.value)
        else:
            continue
        found += [(node.lineno, n) for n in names if owner_of(n, owners) not in (None, here)]
    return found


def module_paths() -> dict[str, Path]:
    modules = {}
    for pkg in ("stacks", "trainer"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def cross_target_uses() -> dict[tuple[str, str], str]:
    """(module, the module it uses) -> where, over stacks/ and trainer/ (the registry left out)."""
    modules, owners = module_paths(), target_packages()

    def resolve(name: str) -> str:  # the longest prefix that is a module: from a.b import NAME -> a.b
        parts = name.split(".")
        while len(parts) > 1 and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts)

    found = {}
    for module, path in modules.items():
        if path.relative_to(REPO).as_posix() == REGISTRY:
            continue
        for line, name in uses_of_other_targets(module, parsed(path), owners):
            found.setdefault((module, resolve(name)), f"{path.relative_to(REPO)}:{line}: {name}")
    return found


def test_every_target_and_launcher_package_is_one_targets():
    owners = target_packages()
    assert set(owners.values()) == set(TARGETS)
    for package in owners:
        assert (REPO / package.replace(".", "/") / "__init__.py").is_file(), package
    launchers = {f"trainer.launchers.{p.parent.name}" for p in (REPO / "trainer" / "launchers").glob("*/__init__.py")}
    assert launchers <= set(owners), f"a launcher no target owns: {sorted(launchers - set(owners))}"


def test_no_module_outside_a_targets_packages_uses_them():
    found = cross_target_uses()
    new = [where for pair, where in sorted(found.items()) if pair not in ALLOWED]
    assert not new, "\n".join(new)
    gone = [pair for pair in ALLOWED if pair not in found]
    assert not gone, f"no longer used, take them off ALLOWED: {gone}"


def test_the_target_scan_finds_a_planted_use_of_another_target():
    owners = target_packages()
    tree = ast.parse(
        '"""Docs may name trainer.launchers.vm."""\nimport json\nfrom stacks.targets import Target\n'
        "from stacks.targets.local.host import cores\n\n\ndef late():\n"
        '    from trainer.launchers.local import supervisor\n    return ["python", "-m", "trainer.launchers.vm"]\n'
    )
    assert uses_of_other_targets("stacks.runs.x", tree, owners) == [
        (4, "stacks.targets.local.host.cores"),
        (8, "trainer.launchers.local.supervisor"),
        (9, "trainer.launchers.vm"),
    ]
    assert uses_of_other_targets("stacks.targets.gcp.sim.x", tree, owners) == [
        (4, "stacks.targets.local.host.cores"),
        (8, "trainer.launchers.local.supervisor"),
    ]
    assert uses_of_other_targets("trainer.launchers.local.y", tree, owners) == [(9, "trainer.launchers.vm")]
