"""Benchmark: synth time, lifecycle overhead of `trainctl train`, `trainctl --help` time.

    make bench            (or: .venv/bin/python -m benchmarks.lifecycle [--env local] [--lang fr])

Overhead = wall time of `trainctl train LANG` (preflight, synth, terraform
init/apply, following, destroy) minus the wall time of a bare
`python -m trainer` with the same arguments on the same data, each in a fresh
project folder so both train the base LM from scratch.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.prefix) / "bin"


def fresh_project(base: Path, name: str) -> Path:
    root = base / name
    root.mkdir()
    shutil.copytree(REPO / "envs", root / "envs")
    shutil.copy(REPO / "cdktf.json", root / "cdktf.json")
    return root


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="local")
    parser.add_argument("--lang", default="fr")
    args = parser.parse_args()
    sample = REPO / "data" / "sample" / args.lang
    trainctl = str(BIN / "trainctl")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        # (c) --help, median of 5 (first call warms the page cache)
        timed([trainctl, "--help"], REPO)
        help_s = statistics.median(timed([trainctl, "--help"], REPO) for _ in range(5))
        # (a) synth of every stack of the env, as a user runs it
        synth_proj = fresh_project(base, "synth")
        synth_s = timed([trainctl, "synth", "--env", args.env], synth_proj)
        # (b) lifecycle overhead
        wrapped = fresh_project(base, "wrapped")
        timed([trainctl, "data", "push", args.lang, str(sample), "--env", args.env], wrapped)
        train_s = timed([trainctl, "train", args.lang, "--env", args.env], wrapped)
        sys.path.insert(0, str(REPO))
        from stacks.config.trainer_command import trainer_args
        from stacks.project import Project

        bare = fresh_project(base, "bare")
        config = Project(bare).load(args.env)
        data_dir = Path(config.bucket[len("file://") :]) / args.lang / "data"
        shutil.copytree(sample, data_dir)
        bare_s = timed(
            [str(BIN / "python"), "-m", "trainer", *trainer_args(config, args.lang), "--run-id", "bench"], bare
        )
    rows = [
        ("trainctl --help (median of 5)", help_s, "<= 1 s"),
        (f"trainctl synth --env {args.env} (all stacks)", synth_s, ""),
        (f"trainctl train {args.lang} --env {args.env}", train_s, ""),
        ("python -m trainer (same args, bare)", bare_s, ""),
        ("lifecycle overhead (train - bare)", train_s - bare_s, "<= 15 s"),
    ]
    print(
        f"machine: {platform.node()} · {platform.processor() or platform.machine()} · "
        f"{__import__('os').cpu_count()} cores · Python {platform.python_version()}"
    )
    for name, secs, target in rows:
        print(f"{name:48} {secs:8.2f} s   {target}")


if __name__ == "__main__":
    main()
