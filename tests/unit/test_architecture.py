"""The operator side's layers: modules import downwards only (no import circle, counting the imports
inside functions, which hide circles from Python but not from a reader)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
        skip = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
            for child in node.body
            for n in ast.walk(child)
        }
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


@pytest.fixture(scope="module")
def real_graph() -> dict[str, set[str]]:
    """The tree's import graph, parsed once for the tests of this module (read, never changed)."""
    return import_graph()


def test_no_module_imports_what_imports_it(real_graph):
    found = circles(real_graph)
    assert not found, "import circles: " + "; ".join(" <-> ".join(sorted(group)) for group in found)


def test_the_circle_finder_finds_a_circle_through_a_function_level_import(tmp_path):
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "stacks" / "low.py").write_text("def late():\n    from stacks.high import x\n")
    (tmp_path / "stacks" / "high.py").write_text("from stacks import low\nx = 1\n")
    (tmp_path / "trainer" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from stacks.high import x\n"
    )
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


def layers(design: Path = REPO / "docs" / "design.md") -> list[set[str]]:
    """The written layer order (docs/design.md, "## Layers"): top line first, packages of one line together."""
    text = design.read_text()
    section = text[text.index("## Layers") :].split("\n## ", 1)[0]
    return [set(line.split()) for line in section.splitlines() if line.startswith("    ") and line.strip()]


def package_of(module: str) -> str:
    """The package a module counts under: its top two names (stacks.targets.gcp.quota -> stacks.targets)."""
    return ".".join(module.split(".")[:2])


def layer_breaks(graph: dict[str, set[str]], order: list[set[str]]) -> list[str]:
    """Imports between packages that do not go down the layer order (a loop needs one), and unplaced packages."""
    tier = {pkg: i for i, line in enumerate(order) for pkg in line}
    found = sorted({f"{package_of(m)} is in no layer of docs/design.md" for m in graph if package_of(m) not in tier})
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = package_of(module), package_of(target)
            if a != b and a in tier and b in tier and tier[a] >= tier[b]:
                found.append(f"{module} imports {target}: {a} is not above {b}")
    return found


def test_packages_import_only_down_the_written_layer_order(real_graph):
    order = layers()
    assert len(order) >= 15 and {"stacks.cli", "trainer.stages", "trainer.runtime"} <= set().union(*order)
    found = layer_breaks(real_graph, order)
    assert not found, "\n".join(found)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """A tree of PACKAGES from {relative path: source}, every folder a package."""
    for rel, source in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        for folder in path.relative_to(root).parents:
            if folder.parts and not (root / folder / "__init__.py").exists():
                (root / folder / "__init__.py").write_text('"""x"""\n')
    return root


def test_the_layer_check_fails_on_a_loop_added_inside_a_function(tmp_path):
    """A tiny tree under the written layers: a stage that uses storage is clean; storage importing a stage inside
    a function (a loop Python only meets at run time) is caught, and so is a package no layer places."""
    tree = write_tree(
        tmp_path,
        {
            "trainer/stages/upload.py": "from trainer.storage.policy import retry\n",
            "trainer/storage/policy.py": "import json\n\n\ndef retry():\n    pass\n",
            "stacks/cli/main.py": "from trainer.storage import policy\n",
        },
    )
    assert not layer_breaks(import_graph(tree), layers())
    policy = tree / "trainer" / "storage" / "policy.py"
    policy.write_text(policy.read_text() + "\n\ndef _late():\n    from trainer.stages import upload\n")
    assert layer_breaks(import_graph(tree), layers()) == [
        "trainer.storage.policy imports trainer.stages.upload: trainer.storage is not above trainer.stages"
    ]
    write_tree(tree, {"trainer/newpkg/thing.py": ""})
    assert "trainer.newpkg is in no layer of docs/design.md" in layer_breaks(import_graph(tree), layers())


def test_the_layer_check_reads_the_real_graph(real_graph):
    """The real tree's graph, one upward edge added: the check names it (the clean result above is not vacuous)."""
    assert "trainer.stages.upload" in real_graph and "trainer.storage.policy" in real_graph
    graph = {module: set(targets) for module, targets in real_graph.items()}
    graph["trainer.storage.policy"].add("trainer.stages.upload")
    assert layer_breaks(graph, layers()) == [
        "trainer.storage.policy imports trainer.stages.upload: trainer.storage is not above trainer.stages"
    ]


def test_a_module_over_400_lines_says_why_in_its_docstring():
    """Lines as the formatter lays them out (a long call: one argument a line)."""
    long = []
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if text.count("\n") > 400 and "Size: over 400 lines because" not in (
                ast.get_docstring(ast.parse(text)) or ""
            ):
                long.append(f"{path.relative_to(REPO)}: {text.count(chr(10))} lines")
    assert not long, long
