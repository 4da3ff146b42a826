"""A target from outside the tree (tests/fixtures/plugins/shelftarget) installed as a user would: its package on the
path, and one line added to the registry (stacks/config/targets.py), nothing else. `trainctl_with_shelf` runs
trainctl in a process whose registry file has that line, as an edited checkout would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[1] / "fixtures" / "plugins"
PACKAGE = PLUGINS / "shelftarget"
REGISTRY_LINE = (
    'TARGETS["shelf"] = TargetEntry("shelf", "shelftarget.target:SHELF", None, '
    '"shelftarget.settings:ShelfLanguageSettings", "shelftarget", "shelftarget.storage:open_shelf")'
)

# trainctl, with stacks/config/targets.py read as its text plus REGISTRY_LINE (before anything imports it).
_WITH_THE_LINE = f"""
import sys, types
from pathlib import Path
import stacks

path = Path(stacks.__file__).parent / "config" / "targets.py"
module = types.ModuleType("stacks.config.targets")
module.__file__ = str(path)
sys.modules[module.__name__] = module
exec(compile(path.read_text() + "\\n" + {REGISTRY_LINE!r} + "\\n", str(path), "exec"), module.__dict__)
from stacks.cli.main import run

sys.argv[0] = "trainctl"
run()
"""


def shelf_env(project: Path, shelf: Path) -> Path:
    """envs/shelf.yaml of `project`: target shelf, its runs on `shelf`."""
    (project / "envs" / "shelf.yaml").write_text(f"target: shelf\nbucket: shelf://{shelf}\n")
    return shelf


def trainctl_with_shelf(project: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", _WITH_THE_LINE, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "200"},
    )
