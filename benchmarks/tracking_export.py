"""Benchmark: `trainctl runs export` of N runs into a real MLflow server, twice.

    .venv/bin/python -m benchmarks.tracking_export --project DIR [--lang fr] [--runs 20]

Run it in a project whose bucket has a finished run of LANG (`make demo` makes one). It copies that run
folder N times under new run ids into a scratch project, starts `mlflow server` (SQLite, local artifacts,
127.0.0.1) as the tests do, runs the real command twice in fresh processes and prints each export's wall
time and the number of MLflow runs after each: the second export must leave the count as it was.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAINCTL = str(Path(sys.executable).parent / "trainctl")


def main() -> int:
    sys.path.insert(0, str(REPO))
    from tests.support.mlflow_server import start_mlflow
    from tests.support.project import make_project

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--lang", default="fr")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    runs = args.project / ".trainstack/local/bucket" / args.lang / "runs"
    source = max((p for p in runs.iterdir() if (p / "model.pth").is_file()), key=lambda p: p.name)
    with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
        root = make_project(Path(tmp) / "proj")
        for i in range(args.runs):
            run_id = f"{source.name[:-4]}{i:04x}"
            shutil.copytree(source, root / ".trainstack/local/bucket" / args.lang / "runs" / run_id)
        server = start_mlflow(Path(tmp))
        try:
            import mlflow

            client = mlflow.MlflowClient(server.url)
            for attempt in ("first", "second"):
                started = time.monotonic()
                done = subprocess.run(
                    [TRAINCTL, "runs", "export", args.lang, "--set", f"tracking.mlflow.uri={server.url}"],
                    cwd=root,
                    capture_output=True,
                    text=True,
                )
                wall = time.monotonic() - started
                experiment = client.get_experiment_by_name("trainstack-local")
                count = len(client.search_runs([experiment.experiment_id], max_results=10_000))
                print(
                    f"{attempt} export of {args.runs} runs: {wall:.1f} s ({wall / args.runs:.2f} s a run), "
                    f"exit {done.returncode}, {count} MLflow runs; {done.stdout.strip().splitlines()[0]}"
                )
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
