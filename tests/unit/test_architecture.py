"""The operator side's layers: modules import downwards only (no import circle, counting the imports
inside functions, which hide circles from Python but not from a reader)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("stacks", "trainer")


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    """module -> the modules of PACKAGES it imports, at any depth of its code (TYPE_CHECKING blocks left out)."""
    modules = {}
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:  # the longest prefix that is a module
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
                for child in node.body for n in ast.walk(child)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            graph[module] |= {t for name in names if (t := resolve(name)) and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Groups of modules that import each other, directly or not."""
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    reachable = {m: reach(m) for m in graph}
    groups = {frozenset({m} | {o for o in reachable[m] if m in reachable[o]}) for m in graph if m in reachable[m]}
    return [set(g) for g in groups]


def test_no_module_imports_what_imports_it():
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(sorted(group)) for group in found)


def test_the_circle_finder_finds_a_circle_through_a_function_level_import(tmp_path):
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "stacks" / "low.py").write_text("def late():\n    from stacks.high import x\n")
    (tmp_path / "stacks" / "high.py").write_text("from stacks import low\nx = 1\n")
    (tmp_path / "trainer" / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                   "    from stacks.high import x\n")
    graph = import_graph(tmp_path)
    assert circles(graph) == [{"stacks.low", "stacks.high"}]
    assert graph["trainer.typed"] == set()  # a TYPE_CHECKING import never runs


def test_each_side_keeps_at_most_six_loose_modules_the_rest_in_packages_named_for_their_concern():
    for package in PACKAGES:
        loose = sorted(p.name for p in (REPO / package).glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
        assert len(loose) <= 6, f"{package}/ top level: {loose}"
        for sub in (REPO / package).iterdir():
            if (sub / "__init__.py").is_file():
                assert ast.get_docstring(ast.parse((sub / "__init__.py").read_text())), f"{sub} says what it holds"
