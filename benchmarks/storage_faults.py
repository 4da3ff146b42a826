"""Benchmark: the storage fault matrix. Each cell is a tiny trainer run (the e2e tests' settings, the French
sample) meeting one storage fault at one moment; it must SUCCEED with the undisturbed run's macro-F1, or FAIL
naming the fault, and in both cases leave everything written before it whole.

    .venv/bin/python -m benchmarks.storage_faults [--cells NAME ...] [--json-out FILE] [--log-lines 10000]

gs:// cells run against gcp-storage-emulator behind tests/support/gcs_proxy.py (503/429/403 answers, stalls
past the request timeout, answers cut mid-body, per object and moment); file:// cells under
tests/support/fault_trainer.py (ENOSPC half way through a write, inside the real LocalBucket code). The
storage policy is shortened for the matrix (TRAINSTACK_STORAGE_DEADLINE_S=4, _TIMEOUT_S=2, _BACKOFF_S=0.1,
_MAX_BACKOFF_S=0.5) so a cell whose retries run out takes seconds, not minutes. `--log-lines N` also
prints the bytes written for an N-line run log, appended in pieces (today) and rewritten whole (before).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.gcs_proxy import GcsProxy, start_emulator  # noqa: E402
from tests.support.project import SAMPLE, TINY_TRAINER_ARGS  # noqa: E402
from trainer.storage import open_bucket  # noqa: E402

FAST_POLICY = {
    "TRAINSTACK_STORAGE_DEADLINE_S": "4",
    "TRAINSTACK_STORAGE_TIMEOUT_S": "2",
    "TRAINSTACK_STORAGE_BACKOFF_S": "0.1",
    "TRAINSTACK_STORAGE_MAX_BACKOFF_S": "0.5",
}
CKPT = r"checkpoints/\d+-[a-z_]+\.ckpt\.pt$"


@dataclass
class Cell:
    name: str
    scheme: str  # "gs" | "file"
    moment: str
    fault: str
    expect: str = "SUCCEEDED"
    error: str = ""  # what a FAILED run's error must say
    proxy: list[dict] = field(default_factory=list)  # GcsProxy.add(**each)
    enospc: dict = field(default_factory=dict)  # FAULT_ENOSPC / FAULT_TIMES / FAULT_SKIP
    cut_newest: bool = False  # SIGTERM mid-classifier, cut the newest checkpoint short, resume


def _at(method: str, pattern: str = "") -> str:
    """Requests about an object whose name matches `pattern` (with `method` first, when given)."""
    if not pattern:
        method, pattern = "", method
    return rf"{method}.* @.*{pattern}"


CELLS = [
    Cell(
        "gs-model-503x3",
        "gs",
        "model.pth upload",
        "503 ×3",
        proxy=[dict(kind="status", pattern=_at("/model.pth$"), times=3)],
    ),
    Cell(
        "gs-model-cut",
        "gs",
        "model.pth upload",
        "answer cut mid-body",
        proxy=[dict(kind="cut", pattern=_at("/model.pth$"))],
    ),
    Cell(
        "gs-first-ckpt-503",
        "gs",
        "first checkpoint",
        "503 ×2",
        proxy=[dict(kind="status", pattern=_at("^POST", CKPT), times=2)],
    ),
    Cell(
        "gs-first-ckpt-stall",
        "gs",
        "first checkpoint",
        "stall 5 s (timeout 2 s)",
        proxy=[dict(kind="stall", pattern=_at("^POST", CKPT), seconds=5.0)],
    ),
    Cell(
        "gs-mid-clf-ckpt-cut",
        "gs",
        "mid-classifier checkpoint",
        "answer cut",
        proxy=[dict(kind="cut", pattern=_at("^POST", r"classifier\.ckpt\.pt$"), skip=1)],
    ),
    Cell(
        "gs-every-ckpt-down",
        "gs",
        "every checkpoint",
        "503 until retries run out",
        proxy=[dict(kind="status", pattern=_at("^POST", CKPT), times=100000)],
    ),
    Cell(
        "gs-final-status-503x3",
        "gs",
        "status write at the end",
        "503 ×3",
        proxy=[dict(kind="status", pattern=_at("^POST", "status.json$"), body='"state": "SUCCEEDED"', times=3)],
    ),
    Cell(
        "gs-log-429x4",
        "gs",
        "log appends",
        "429 ×4",
        proxy=[dict(kind="status", status=429, pattern=_at("^POST", "log.txt.parts/"), times=4)],
    ),
    Cell(
        "gs-train-read-503",
        "gs",
        "train.csv read",
        "503 ×2",
        proxy=[dict(kind="status", pattern=_at("^GET", "data/train.csv$"), times=2)],
    ),
    Cell(
        "gs-status-read-cut",
        "gs",
        "status read at start",
        "answer cut",
        proxy=[dict(kind="cut", pattern="^GET .*status.json.*alt=media")],
    ),
    Cell(
        "gs-cache-write-503",
        "gs",
        "token cache write",
        "503 ×2",
        proxy=[dict(kind="status", pattern=_at("^POST", "/cache/"), times=2)],
    ),
    Cell(
        "gs-metrics-down",
        "gs",
        "metrics.json upload",
        "503 until retries run out (3 rounds)",
        "FAILED",
        "metrics.json not uploaded",
        proxy=[dict(kind="status", pattern=_at("^POST", "metrics.json$"), times=100000)],
    ),
    Cell(
        "gs-model-403",
        "gs",
        "model.pth upload",
        "403",
        "FAILED",
        "permission denied",
        proxy=[dict(kind="status", status=403, pattern=_at("/model.pth$"), times=100000)],
    ),
    Cell("gs-torn-ckpt-resume", "gs", "resume", "newest checkpoint cut short", cut_newest=True),
    Cell("file-first-ckpt-enospc", "file", "first checkpoint", "ENOSPC", enospc={"FAULT_ENOSPC": CKPT}),
    Cell(
        "file-mid-clf-ckpt-enospc",
        "file",
        "mid-classifier checkpoint",
        "ENOSPC",
        enospc={"FAULT_ENOSPC": r"classifier\.ckpt\.pt$", "FAULT_SKIP": "1"},
    ),
    Cell(
        "file-log-enospc", "file", "log appends", "ENOSPC ×2", enospc={"FAULT_ENOSPC": "log.txt$", "FAULT_TIMES": "2"}
    ),
    Cell(
        "file-progress-status-enospc",
        "file",
        "status write mid-run",
        "ENOSPC",
        enospc={"FAULT_ENOSPC": "status.json$", "FAULT_SKIP": "3"},
    ),
    Cell("file-cache-enospc", "file", "token cache write", "ENOSPC", enospc={"FAULT_ENOSPC": "/cache/"}),
    Cell(
        "file-model-enospc",
        "file",
        "model.pth write",
        "ENOSPC",
        "FAILED",
        "no space left on the device",
        enospc={"FAULT_ENOSPC": "/model.pth$"},
    ),
    Cell("file-torn-ckpt-resume", "file", "resume", "newest checkpoint cut short", cut_newest=True),
]


def stage(bucket) -> dict[str, str]:
    """The sample data in the bucket; returns each object's sha256 (what must survive every cell)."""
    for path in (SAMPLE / "fr").rglob("*"):
        if path.is_file() and path.suffix in (".csv", ".txt"):
            bucket.upload(path, f"fr/data/{path.relative_to(SAMPLE / 'fr').as_posix()}")
    return {k: hashlib.sha256(bucket.read_bytes(k)).hexdigest() for k in bucket.list("fr/data/")}


def trainer(uri: str, run_id: str, env: dict, *, module: str = "trainer") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", module, "--lang", "fr", "--bucket", uri, "--run-id", run_id, *TINY_TRAINER_ARGS],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def status_of(bucket, run_id: str) -> dict:
    key = f"fr/runs/{run_id}/status.json"
    return json.loads(bucket.read_bytes(key)) if bucket.exists(key) else {}


def sigterm_mid_classifier(bucket, run_id: str, proc: subprocess.Popen) -> None:
    while proc.poll() is None:
        s = status_of(bucket, run_id)
        if s.get("stage") == "classifier" and (s.get("epoch") or 0) >= 1:
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.1)
    proc.communicate(timeout=300)


def cut_newest_checkpoint(bucket, run_id: str) -> str:
    pointer = json.loads(bucket.read_bytes(f"fr/runs/{run_id}/checkpoints/LATEST.ckpt.json"))
    key = f"fr/runs/{run_id}/{pointer['key']}"
    bucket.write_bytes(key, bucket.read_bytes(key)[: pointer["size"] // 3])
    return pointer["key"]


def checkpoints_whole(bucket, run_id: str) -> bool:
    """Every checkpoint the pointer names is whole, or the resume passes over it (the torn cells)."""
    key = f"fr/runs/{run_id}/checkpoints/LATEST.ckpt.json"
    if not bucket.exists(key):
        return True
    pointer = json.loads(bucket.read_bytes(key))
    for entry in [pointer, *pointer.get("previous", [])]:
        obj = f"fr/runs/{run_id}/{entry['key']}"
        if bucket.exists(obj) and hashlib.sha256(bucket.read_bytes(obj)).hexdigest() != entry["sha256"]:
            return False
    return True


def run_cell(cell: Cell, base: Path, proxy: GcsProxy, env: dict, baseline: dict[str, float]) -> dict:
    uri = f"gs://test-bucket/{cell.name}" if cell.scheme == "gs" else f"file://{base / cell.name}"
    bucket = open_bucket(uri)
    proxy.clear()
    data = stage(bucket)
    run_id = "r1"
    cell_env = {**env, **cell.enospc}
    module = "tests.support.fault_trainer" if cell.enospc else "trainer"
    started = time.monotonic()
    if cell.cut_newest:
        sigterm_mid_classifier(bucket, run_id, trainer(uri, run_id, cell_env))
        cut_newest_checkpoint(bucket, run_id)
    for spec in cell.proxy:
        proxy.add(**spec)
    proc = trainer(uri, run_id, cell_env, module=module)
    out, _ = proc.communicate(timeout=900)
    fired = sum(f.hits for f in proxy.faults) + out.count("fault: ENOSPC on ")
    proxy.clear()
    wall = time.monotonic() - started
    status = status_of(bucket, run_id)
    state = status.get("state", f"no status (exit {proc.returncode})")
    metrics_key = f"fr/runs/{run_id}/metrics.json"
    macro = json.loads(bucket.read_bytes(metrics_key))["macro_f1"] if bucket.exists(metrics_key) else None
    intact = data == {k: hashlib.sha256(bucket.read_bytes(k)).hexdigest() for k in bucket.list("fr/data/")}
    whole = checkpoints_whole(bucket, run_id) or cell.cut_newest
    log = bucket.read_appended(f"fr/runs/{run_id}/log.txt")[0].decode("utf-8", "replace")
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")
    clean = all(stamp.match(ln) and len(stamp.findall(ln)) == 1 for ln in log.splitlines())  # no torn line
    said = [
        ln
        for ln in (out + "\n" + log).splitlines()
        if any(
            w in ln
            for w in (
                "storage:",
                "not saved",
                "not written",
                "failed (",
                "is cut short",
                "kept in",
                "resuming from the one before",
                "FAILED",
            )
        )
    ]
    fired_ok = fired > 0 or not (cell.proxy or cell.enospc)  # a fault that never fired proves nothing
    ok = (
        fired_ok
        and clean
        and state == cell.expect
        and intact
        and whole
        and (
            macro == baseline[cell.scheme] if cell.expect == "SUCCEEDED" else cell.error in (status.get("error") or "")
        )
    )
    return {
        "cell": cell.name,
        "bucket": cell.scheme,
        "moment": cell.moment,
        "fault": cell.fault,
        "expect": cell.expect,
        "state": state,
        "macro_f1": macro,
        "baseline": baseline[cell.scheme],
        "data_intact": intact,
        "checkpoints_whole": whole,
        "log_clean": clean,
        "faults_fired": fired,
        "error": status.get("error"),
        "said": said[:3],
        "wall_s": round(wall, 1),
        "ok": ok,
    }


def log_bytes(lines: int, proxy: GcsProxy) -> dict:
    """Bytes sent to write an N-line run log flushed every 10 lines: pieces (today) and whole rewrites (before)."""
    from trainer.runfiles.status_file import RunStatus
    from trainer.runtime.runlog import RunLog

    out = {}
    bucket = open_bucket("gs://test-bucket/log-bytes")
    proxy.clear()
    log = RunLog(bucket, RunStatus(run_id="r", lang="fr", env="local"), flush_every_s=1e9)
    for i in range(lines):
        log._pending.append(f"2026-11-26T00:00:00Z line {i:05d} of the run log, about sixty bytes\n")
        if i % 10 == 9:
            log.flush()
    log.flush()
    out["pieces"] = proxy.bytes_written("log.txt")
    text = bucket.read_appended("fr/runs/r/log.txt")[0]
    out["log_bytes"] = len(text)
    proxy.clear()
    flushed = len(text) // (lines // 10)  # ten lines of equal length per flush
    for end in range(flushed, len(text) + 1, flushed):  # the old RunLog: the whole log again at every flush
        bucket.write_bytes("fr/runs/r/log-whole.txt", text[:end])
    out["rewritten"] = proxy.bytes_written("log-whole.txt")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", nargs="*", help="cell names (default: all)")
    parser.add_argument("--json-out")
    parser.add_argument("--log-lines", type=int, default=0)
    args = parser.parse_args()
    cells = [c for c in CELLS if not args.cells or c.name in args.cells]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        emulator, proxy = start_emulator(base)
        env = {
            **os.environ,
            **FAST_POLICY,
            "STORAGE_EMULATOR_HOST": proxy.url,
            "GOOGLE_CLOUD_PROJECT": "test-project",
            "PYTHONPATH": str(REPO),
        }
        os.environ.update({k: env[k] for k in ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", *FAST_POLICY)})
        try:
            if args.log_lines:
                print(json.dumps(log_bytes(args.log_lines, proxy)), flush=True)
            baseline = {}
            for scheme in sorted({c.scheme for c in cells}):
                row = run_cell(
                    Cell(f"{scheme}-undisturbed", scheme, "-", "none"), base, proxy, env, {scheme: None, **baseline}
                )
                baseline[scheme] = row["macro_f1"]
                print(
                    f"undisturbed {scheme}: {row['state']} macro-F1 {row['macro_f1']} in {row['wall_s']} s", flush=True
                )
            print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
            print(
                "| cell | bucket | moment | fault (times it fired) | expected | got | macro-F1 | data intact | "
                "checkpoints whole | what the run said | wall |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            rows = []
            for cell in cells:
                r = run_cell(cell, base, proxy, env, baseline)
                rows.append(r)
                said = "; ".join(s[:110] for s in (r["said"][:1] or [r["error"] or ""]))
                print(
                    f"| {r['cell']} | {r['bucket']} | {r['moment']} | {r['fault']} ({r['faults_fired']}) | "
                    f"{r['expect']} | "
                    f"{'✔ ' if r['ok'] else '✘ '}{r['state']} | {r['macro_f1']} | {r['data_intact']} | "
                    f"{r['checkpoints_whole']} | {said.replace('|', '/')} | {r['wall_s']} s |",
                    flush=True,
                )
            print(f"{sum(r['ok'] for r in rows)} of {len(rows)} cells as expected")
            if args.json_out:
                Path(args.json_out).write_text(json.dumps({"baseline": baseline, "cells": rows}, indent=1))
        finally:
            proxy.stop()
            emulator.terminate()


if __name__ == "__main__":
    main()
