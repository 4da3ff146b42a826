"""Benchmark: `trainctl predict LANG --input FILE --output FILE` on growing files.

    .venv/bin/python -m benchmarks.predict_file --project DIR [--lang fr] [--rows 10000 100000]
                                                [--format csv] [--batch-rows 1024]

Run it in a project whose bucket has a model of LANG (promoted, else the newest successful run:
`make demo` makes one). For each size it writes a file of that many rows (the language's sample
texts, each with its row number appended, so no two rows are equal), runs the real command in a
fresh process and prints rows/s and that process's peak RSS (ru_maxrss of the child). Bounded
memory means the peak stays flat as the file grows.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
TRAINCTL = str(Path(sys.executable).parent / "trainctl")


def sample_texts(lang: str) -> list[str]:
    with open(REPO / "data" / "sample" / lang / "train.csv", newline="", encoding="utf-8") as fh:
        return [row["text"] for row in csv.DictReader(fh)]


def write_input(path: Path, texts: list[str], rows: int) -> None:
    frame = pd.DataFrame(
        {"id": [f"r{i}" for i in range(rows)], "text": [f"{texts[i % len(texts)]} ({i})" for i in range(rows)]}
    )
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    elif path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        frame.to_csv(path, index=False)


def measure(project: Path, lang: str, src: Path, out: Path, batch_rows: int) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    proc = subprocess.run(
        [TRAINCTL, "predict", lang, "--input", str(src), "--output", str(out), "--batch-rows", str(batch_rows)],
        cwd=project,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "wall_s": round(seconds, 1),
        "peak_rss_mb": round(max(peak, before) / 1024),
        "line": proc.stdout.strip().splitlines()[-1],
    }


def check_order(project: Path, lang: str, src: Path, out: Path) -> None:
    """Rows batched and sorted by length come back in their order: the output's rows 0 and 5 carry the
    probabilities of their texts classified alone (a real model tells texts apart; a tiny test model may not)."""
    texts = pd.read_csv(src, nrows=6)["text"]
    got = pd.read_csv(out, nrows=6)
    proc = subprocess.run([TRAINCTL, "predict", lang, texts[5], texts[0]], cwd=project, capture_output=True, text=True)
    alone = [line.split(", ") for line in proc.stdout.splitlines() if line.startswith("  ")]
    for row, shown in zip((5, 0), alone):
        for item in shown:
            label, value = item.strip().rsplit(" ", 1)
            if abs(got[f"prob_{label}"][row] - float(value)) > 0.006:
                raise SystemExit(f"row {row}: prob_{label} {got[f'prob_{label}'][row]} in the file, {value} alone")
    print("order check: rows 0 and 5 match their texts classified alone", flush=True)


def machine() -> dict:
    """What the figures depend on beside the code: the same commit read 1,043 and 3,674 rows/s on one VM
    type on two days."""
    import os
    import platform

    cores = sorted(os.sched_getaffinity(0))
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = [line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")]
    mhz = [float(line.split(":", 1)[1]) for line in info.splitlines() if line.startswith("cpu MHz")]
    return {
        "cpu": models[0] if models else platform.processor() or platform.machine(),
        "cores": len(cores),
        "mhz_now": round(sum(mhz[c] for c in cores if c < len(mhz)) / max(1, len(cores))) if mhz else None,
        "load_1min": round(os.getloadavg()[0], 2),
        "bf16": " avx512_bf16" in info or " amx_bf16" in info,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", type=Path, default=Path.cwd())
    parser.add_argument("--lang", default="fr")
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--format", choices=["csv", "jsonl", "parquet"], default="csv")
    parser.add_argument("--batch-rows", type=int, default=1024)
    args = parser.parse_args()
    texts = sample_texts(args.lang)
    print(json.dumps({"machine": machine()}), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-predict-") as tmp:
        for rows in sorted(args.rows):  # ru_maxrss of children only grows: smallest first
            src, out = Path(tmp) / f"in-{rows}.{args.format}", Path(tmp) / f"out-{rows}.{args.format}"
            write_input(src, texts, rows)
            result = measure(args.project, args.lang, src, out, args.batch_rows)
            print(
                json.dumps(
                    {"rows": rows, "format": args.format, "input_mb": round(src.stat().st_size / 2**20, 1), **result}
                ),
                flush=True,
            )
            if args.format == "csv" and rows == min(args.rows):
                check_order(args.project, args.lang, src, out)


if __name__ == "__main__":
    main()
