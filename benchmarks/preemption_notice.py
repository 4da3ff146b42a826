"""Benchmark: work lost per preemption with and without the preemption notice (the local Spot market's `notice_s`).

    taskset -c 1 .venv/bin/python -m benchmarks.preemption_notice [--data data/sample/fr] [--workdir DIR]

`trainctl train fr` in a temp project whose env `notice` is local-spot with one zone (sim-a) and a small model
(emb 200, 2 x 600 hidden, bs 8: 15 batches an LM fine-tuning epoch on the French sample, slow enough for the
market's 0.1 s poll of the log to land inside the epoch; checkpoints at epoch ends only; a progress line every
batch), three times:
undisturbed; preempted with the notice (SIGTERM, SIGKILL 25 s later: the trainer saves at the end of its batch);
preempted without it (SIGKILL at once: what it trained since its last checkpoint is lost). The preemption comes
at a fixed point: halfway through lm_finetune's second epoch (the market's trigger `stage: lm_finetune, epoch: 1,
batch: N/2`, read from the progress lines; the kill lands a batch or two after it, as the market polls the log).

Per preempted run: batches recomputed (the last batch the log shows trained before the preemption, minus where
the resumed trainer started: its "resumed at" line; batches counted across the stage's epochs and phases) and
wall seconds lost (its wall time minus the undisturbed run's; and, from the log, preemption to the first batch
past the interruption point).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lifecycle import fresh_project

REPO = Path(__file__).resolve().parents[1]
TRAINCTL = str(Path(sys.prefix) / "bin" / "trainctl")
STAGE = "lm_finetune"
SETTINGS = [
    "defaults.trainer.epochs_base_lm=1",
    "defaults.trainer.epochs_lm=3",
    "defaults.trainer.epochs_clf=1",
    "defaults.trainer.min_clf_steps=0",
    "defaults.trainer.emb_sz=200",
    "defaults.trainer.n_hid=600",
    "defaults.trainer.n_layers=2",
    "defaults.trainer.precision=fp32",
    "defaults.trainer.bs=8",
    "defaults.trainer.checkpoint_minutes=0",
    "defaults.trainer.progress_seconds=0",
]
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (.*)")
PROGRESS = re.compile(rf"{STAGE} epoch (\d+)/\d+: batch ([\d,]+)/([\d,]+)")
EPOCH_END = re.compile(rf"{STAGE} \[(\d+)/\d+\] epoch (\d+)/")
RESUMED = re.compile(rf"{STAGE}: resumed at {STAGE} phase (\d+), epoch (\d+)(?:, batch (\d+))?")


def overlay(at_batch: int | None, notice_s: float) -> dict:
    market = {"speedup": 1, "zones": {"sim-a": {}}, "notice_s": notice_s, "preemptions": []}
    if at_batch is not None:
        market["preemptions"] = [{"zone": "sim-a", "stage": STAGE, "epoch": 1, "batch": at_batch, "outage_s": 0}]
    return {
        "extends": "local",
        "bucket": "file://.trainstack/notice/bucket",
        "defaults": {"creation_error_minutes": 0.1, "capacity_wait_minutes": 1},
        "local": {"spot_market": market},
    }


def train(base: Path, name: str, data: Path, at_batch: int | None, notice_s: float) -> dict:
    """One run in its own project: its wall seconds and log lines (stamp, text)."""
    root = fresh_project(base, name)
    (root / "envs" / "notice.yaml").write_text(json.dumps(overlay(at_batch, notice_s)))
    sets = [arg for s in SETTINGS for arg in ("--set", s)]
    subprocess.run(
        [TRAINCTL, "data", "push", "fr", str(data.resolve()), "--env", "notice"],
        cwd=root,
        check=True,
        capture_output=True,
    )
    start = time.perf_counter()
    done = subprocess.run([TRAINCTL, "train", "fr", "--env", "notice", *sets], cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{name}: train exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    [run] = (root / ".trainstack/notice/bucket/fr/runs").iterdir()
    lines = [(m[1], m[2]) for line in (run / "log.txt").read_text().splitlines() if (m := STAMP.match(line))]
    from trainer.runfiles.timestamps import parse_time

    return {"wall_s": wall, "lines": [(parse_time(t).timestamp(), text) for t, text in lines]}


def batches_per_epoch(lines) -> int:
    return max(int(m[3].replace(",", "")) for _, text in lines if (m := PROGRESS.search(text)))


def phase_offsets(lines) -> dict[int, int]:
    """Stage epochs before each phase (1-based), from the epoch lines `lm_finetune [phase/phases] epoch E/T`."""
    first: dict[int, int] = {}
    for _, text in lines:
        if m := EPOCH_END.search(text):
            first.setdefault(int(m[1]), int(m[2]))
    return {phase: epoch - 1 for phase, epoch in first.items()}


def lost(run: dict, per: int, offsets: dict[int, int], undisturbed_s: float) -> dict:
    """Batches recomputed and seconds lost for the one preemption of `run`."""
    lines = run["lines"]
    cut = next(i for i, (_, text) in enumerate(lines) if "spot market: Spot VM in sim-a preempted" in text)
    preempted_at = lines[cut][0]
    trained = 0  # stage batches done before the preemption, by the log
    for _, text in lines[:cut]:
        if m := PROGRESS.search(text):
            trained = max(trained, (int(m[1]) - 1) * per + int(m[2].replace(",", "")))
        elif m := EPOCH_END.search(text):
            trained = max(trained, int(m[2]) * per)
    resumed = None
    for _, text in lines[cut:]:
        if m := RESUMED.search(text):
            resumed = (offsets[int(m[1])] + int(m[2]) - 1) * per + int(m[3] or 0)
            break
    saved = next((text for _, text in lines[cut:] if text.startswith("preempted: checkpoint saved at")), None)
    back = next(
        (
            t
            for t, text in lines[cut:]
            if (m := PROGRESS.search(text)) and (int(m[1]) - 1) * per + int(m[2].replace(",", "")) > trained
        ),
        None,
    )
    return {
        "trained_before": trained,
        "resumed_at": resumed,
        "recomputed": None if resumed is None else max(trained - resumed, 0),
        "saved": saved,
        "wall_lost_s": round(run["wall_s"] - undisturbed_s, 1),
        "preemption_to_past_it_s": None if back is None else round(back - preempted_at, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / "data" / "sample" / "fr")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the projects here (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = args.workdir or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        undisturbed = train(base, "undisturbed", args.data, None, 25)
        per, offsets = batches_per_epoch(undisturbed["lines"]), phase_offsets(undisturbed["lines"])
        at_batch = per // 2
        rows = {"undisturbed": {"wall_s": round(undisturbed["wall_s"], 1)}}
        for name, notice_s in (("notice", 25), ("no notice", 0)):
            run = train(base, name.replace(" ", "-"), args.data, at_batch, notice_s)
            rows[name] = {"wall_s": round(run["wall_s"], 1), **lost(run, per, offsets, undisturbed["wall_s"])}
    print(
        json.dumps(
            {
                "machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}",
                "stage": STAGE,
                "batches_per_epoch": per,
                "preemption_at": f"{STAGE} epoch 2 batch {at_batch}",
                "runs": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
