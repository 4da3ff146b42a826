"""The code a logged model carries: a copy of the `trainer` package under a name unique to that code.

MLflow puts a model's `code_paths` folder on sys.path and its code is imported by module name, so two
models carrying a `trainer` package, loaded in one process (a service with `fr@champion` and
`de@champion` exported from different commits), would both run whichever `trainer` was imported first
(MLflow's "Limitation of code_paths"). Instead the copy is named `trainer_<hash>`, the hash of the
package's files, and its imports of `trainer` are rewritten to that name, so:

- two different codes never share a module: each model imports and runs its own;
- the same code gets the same name, and sharing its modules is harmless (they are the same);
- nothing is written to `sys.modules['trainer']`: a process that has the project's `trainer` keeps it;
- model.pth pickles the trainer's classes as `trainer.…`: the served model unpickles them from its own
  package (served_model.CODE_PACKAGE), so the weights meet the code that was logged with them.

Imports are rewritten where Python sees them (every `from trainer… import`, `import trainer.x as y`,
found with `ast`, inside functions too); a module naming `trainer` in a string (the trainer's own
subprocesses and worker preloads, training only) is left alone. `import trainer.x` without `as` is
refused: it binds the name `trainer` itself, which the copy cannot keep.
"""

from __future__ import annotations

import ast
import hashlib
import re
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from trainer.runfiles.code_archive import archive_code, package_files

PACKAGE = "trainer"
_SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc")


def code_package(source: Path) -> str:
    """`trainer_<hash>`: the name of the code in `source` (the trainer package's folder), from every
    file's path and bytes, so any change to the code is another name."""
    digest = hashlib.sha256()
    for path in package_files(source):
        digest.update(path.relative_to(source).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"{PACKAGE}_{digest.hexdigest()[:16]}"


def _ours(module: str | None) -> bool:
    return module is not None and module.split(".")[0] == PACKAGE


def renamed_imports(source: str, package: str, *, where: str = "<code>") -> str:
    """`source` with its imports of `trainer` importing `package` instead."""
    lines = source.encode("utf-8").splitlines(keepends=True)
    spots: list[tuple[int, int]] = []  # (line index, byte offset) where a `trainer` to rename starts
    for node in ast.walk(ast.parse(source, filename=where)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module):
            line = lines[node.lineno - 1]
            start = re.compile(rb"from\s+").match(line, node.col_offset)
            if start is None or not line.startswith(PACKAGE.encode(), start.end()):
                raise ValueError(f"{where}:{node.lineno}: write `from {node.module} import ...` on one line")
            spots.append((node.lineno - 1, start.end()))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name):
                    if alias.asname is None:
                        raise ValueError(
                            f"{where}:{alias.lineno}: `import {alias.name}` binds the name "
                            f"{PACKAGE!r}; write `from ... import ...` or `import ... as ...`"
                        )
                    spots.append((alias.lineno - 1, alias.col_offset))
    for index, offset in sorted(spots, reverse=True):  # right to left: earlier offsets stay valid
        line = lines[index]
        lines[index] = line[:offset] + package.encode() + line[offset + len(PACKAGE) :]
    return b"".join(lines).decode("utf-8")


def copy_code(*, source: Path, dest: Path) -> Path:
    """The package in `source` copied to dest/<code_package(source)>/, its imports renamed -> that folder."""
    package = code_package(source)
    target = Path(dest) / package
    shutil.copytree(source, target, ignore=_SKIPPED)
    for path in target.rglob("*.py"):
        where = f"{PACKAGE}/{path.relative_to(target)}"
        path.write_text(renamed_imports(path.read_text(encoding="utf-8"), package, where=where), encoding="utf-8")
    return target


def zipped(code: Path) -> Path:
    """A copy_code folder as one zip beside it (`trainer_<hash>.zip`, entries `trainer_<hash>/...`): what the
    logged model carries, one file rather than the package's hundred-odd (each one an upload, which a server
    with logins authorizes one by one). The model's code file puts it on sys.path (mlflow_model_code.py)."""
    archive = Path(code).parent / f"{Path(code).name}.zip"
    archive.write_bytes(archive_code(code, name=Path(code).name))
    return archive


@contextmanager
def importable(code: Path):
    """`code` (a copy_code folder) importable while MLflow saves the model (it runs the model's code file
    to check it); afterwards sys.path is as it was and none of its modules stay imported (a package's
    later imports would look for them in `code`, a folder about to go)."""
    folder = str(Path(code).parent)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)
        for name in [name for name in sys.modules if name.split(".")[0] == Path(code).name]:
            del sys.modules[name]
