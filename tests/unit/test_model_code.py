"""The code a logged model carries: the trainer package under a name of its own, its imports renamed."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import trainer
from trainer.serving.model_code import code_package, copy_code, importable, renamed_imports

TRAINER = Path(trainer.__file__).parent


def test_every_import_of_trainer_is_renamed_and_nothing_else():
    source = '''"""from trainer import in a docstring stays"""
from __future__ import annotations
from trainer.serving.served_model import ServedModel
from trainer import errors  # é, after the import
import trainer.params as params, json
from trainer_other import x
from .relative import y
TEXT = "trainer.text.worker_preload"  # a string naming a module: the trainer's own subprocesses


def late():
    from trainer.classification.metrics import (decide,
                                                 macro_f1)
    if True: import trainer.storage as storage
'''
    out = renamed_imports(source, "trainer_0123")
    assert out == (
        source.replace("from trainer.serving", "from trainer_0123.serving")
        .replace("from trainer import errors", "from trainer_0123 import errors")
        .replace("import trainer.params", "import trainer_0123.params")
        .replace("from trainer.classification", "from trainer_0123.classification")
        .replace("import trainer.storage", "import trainer_0123.storage")
    )


@pytest.mark.parametrize("line", ["import trainer.params", "import json, trainer"])
def test_an_import_binding_the_name_trainer_is_refused(line):
    with pytest.raises(ValueError, match="binds the name 'trainer'"):
        renamed_imports(line + "\n", "trainer_0123", where="x.py")


def test_the_name_follows_the_code(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name / "serving").mkdir(parents=True)
        (tmp_path / name / "__init__.py").write_text("")
        (tmp_path / name / "serving" / "x.py").write_text("VALUE = 1\n")
    (tmp_path / "b" / "serving" / "__pycache__").mkdir()
    (tmp_path / "b" / "serving" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"compiled")
    assert code_package(tmp_path / "a") == code_package(tmp_path / "b")  # caches are not the code
    (tmp_path / "b" / "serving" / "x.py").write_text("VALUE = 2\n")
    assert code_package(tmp_path / "a") != code_package(tmp_path / "b")
    assert code_package(tmp_path / "a").startswith("trainer_")


def test_the_whole_trainer_copies_with_no_import_of_trainer_left(tmp_path):
    """Every module of the real package rewrites (a new `import trainer.x` would fail here, at test time,
    not at a user's export), and the copy imports under its own name, leaving nothing behind."""
    code = copy_code(source=TRAINER, dest=tmp_path)
    assert code.name == code_package(TRAINER) and (code / "serving" / "mlflow_model_code.py").exists()
    for path in code.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            assert not [n for n in names if n and n.split(".")[0] == "trainer"], (path, ast.unparse(node))
    path_before = list(sys.path)
    with importable(code):
        import importlib

        module = importlib.import_module(f"{code.name}.serving.served_model")
        assert module.CODE_PACKAGE == code.name and module.UnservableRun.__module__ == module.__name__
    assert sys.path == path_before and not [m for m in sys.modules if m.startswith(code.name)]
