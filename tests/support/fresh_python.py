"""Logged models loaded in a fresh interpreter that cannot import the project: what a serving host has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Run in `python -I` (no user site, no script folder, no PYTHONPATH) with the project's packages made
# unimportable: the editable install's finder would otherwise find them.
LOADER = textwrap.dedent("""
    import importlib.abc, json, sys

    class NoProject(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("trainer", "stacks", "tests"):
                raise ModuleNotFoundError(f"{name}: the project is not importable here", name=name)

    sys.meta_path.insert(0, NoProject())
    import mlflow.pyfunc
    import pandas as pd

    uris, texts = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    models = [mlflow.pyfunc.load_model(uri) for uri in uris]  # both loaded before either predicts
    out = []
    for model in models:
        served = model.predict(pd.DataFrame({"text": texts}))
        probs = served[[c for c in served.columns if c.startswith("prob_")]].to_numpy().tolist()
        out.append({"labels": [list(cell) for cell in served["labels"]], "probs": probs,
                    "code": type(model.unwrap_python_model().served).__module__})
    ours = {name.split(".")[0] for name in sys.modules if name.startswith(("trainer", "stacks"))}
    out.append(sorted(ours))
    print(json.dumps(out))
""")


def load_in_a_fresh_interpreter(uris: list[str], texts: list[str], *, cwd: Path, env: dict | None = None) -> list:
    """[{labels, probs, code} per model, the top-level packages named trainer*/stacks* it imported]: each
    model's labels (lists) and probabilities per text, and the module its ServedModel came from."""
    command = [sys.executable, "-I", "-W", "ignore", "-c", LOADER, json.dumps(uris), json.dumps(texts)]
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=cwd, env={**os.environ, **(env or {})}
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
