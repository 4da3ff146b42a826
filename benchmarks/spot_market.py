"""Benchmark: `trainctl train` in a simulated Spot market, against the undisturbed run with the same seed.

    .venv/bin/python -m benchmarks.spot_market [--profiles calm typical harsh] [--speedup 30] [--seed 7]
        [--data data/sample/fr] [--set KEY=VALUE ...]

Each profile is a market drawn from a seed after the public Spot GPU traces (skypilot-org/spot-traces,
"Can't Be Late", NSDI '24): preemptions as a Poisson process per zone (calm 0.1, typical 0.3, harsh 1.0 an
hour), each leaving its zone dry for a log-normal outage (median 0.4 h, long tail); the two zones of one
region fail together more often than zones of different regions (an outage of sim-a starts one in sim-b with
probability 0.43, one of sim-c with 0.14). Market time runs `--speedup` times wall time; the lifecycle's
windows are set in market minutes (creation_error_minutes 2, capacity_wait_minutes 120).

Per profile: wall time, goodput (training seconds of the undisturbed run / seconds a trainer process ran),
each preemption's detection delay (wall s from the market's preemption to `train` seeing it) and time to
training again (market s), moves, false recoveries (a move away from a zone that had capacity), and whether
the final figures equal the undisturbed run's.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lifecycle import fresh_project

REPO = Path(__file__).resolve().parents[1]
TRAINCTL = str(Path(sys.prefix) / "bin" / "trainctl")
PROFILES = {"calm": 0.1, "typical": 0.3, "harsh": 1.0}  # preemptions per market hour and zone
ZONES = ("sim-a", "sim-b", "sim-c")  # a, b: one region; c: another
CORRELATED = {("sim-a", "sim-b"): 0.43, ("sim-a", "sim-c"): 0.14}
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (.*)$")


def draw_market(rate_per_h: float, seed: int, horizon_h: float = 12.0, speedup: float = 30.0) -> dict:
    """A market spec (envs' spot_market) drawn from the profile: preemptions at market times, outages after them."""
    rng = random.Random(seed)
    preemptions, outages = [], {z: [] for z in ZONES}
    for zone in ZONES:
        t = 0.0
        while True:
            t += rng.expovariate(rate_per_h) * 3600
            if t > horizon_h * 3600:
                break
            outage = min(rng.lognormvariate(math.log(0.4 * 3600), 1.0), 6 * 3600)
            # capacity taken back: the zone is dry whether or not the run is there; a VM there is preempted
            outages[zone].append({"start_s": round(t), "end_s": round(t + outage)})
            preemptions.append({"zone": zone, "at_s": round(t), "outage_s": 0})
            for (first, other), p in CORRELATED.items():
                if zone == first and rng.random() < p:
                    outages[other].append({"start_s": round(t), "end_s": round(t + outage * rng.uniform(0.5, 1.0))})
    return {"speedup": speedup, "zones": {z: {"outages": outages[z]} for z in ZONES}, "preemptions": preemptions}


def has_capacity(market: dict, zone: str, t: float) -> bool:
    return not any(
        o["start_s"] <= t and (o.get("end_s") is None or t < o["end_s"]) for o in market["zones"][zone]["outages"]
    )


def stamped(log: str) -> list[tuple[float, str]]:
    from trainer.runfiles.timestamps import parse_time

    out = []
    for line in log.splitlines():
        m = STAMP.match(line)
        if m:
            out.append((parse_time(m.group(1)).timestamp(), m.group(2)))
    return out


def trainer_seconds(log: str) -> float:
    """Seconds trainer processes ran: from each start line to its interruption or its end."""
    total, start = 0.0, None
    for t, text in stamped(log):
        if re.match(r"run \S+ \(\w+, env ", text):
            start = t
        elif start is not None and (
            text.startswith("interrupted") or text.startswith("SUCCEEDED") or text.startswith("a peer process stopped")
        ):
            total, start = total + max(t - start, 1.0), None
    return total


def project(base: Path, name: str, data: Path, market: dict | None, env_sets: dict) -> tuple[Path, str]:
    root = fresh_project(base, name)
    env = "local"
    if market is not None:
        env = "bench-spot"
        overlay = {
            "extends": "local",
            "bucket": f"file://.trainstack/{env}/bucket",
            "defaults": env_sets,
            "spot_market": market,
        }
        (root / "envs" / f"{env}.yaml").write_text(json.dumps(overlay))
    pushed = subprocess.run(
        [TRAINCTL, "data", "push", "fr", str(data.resolve()), "--env", env], cwd=root, capture_output=True, text=True
    )
    if pushed.returncode:
        raise SystemExit(f"data push failed:\n{pushed.stderr}")
    return root, env


def run(root: Path, env: str, sets: list[str]) -> dict:
    started = time.monotonic()
    r = subprocess.run([TRAINCTL, "train", "fr", "--env", env, *sets], cwd=root, capture_output=True, text=True)
    wall = time.monotonic() - started
    runs = root / f".trainstack/{env}/bucket/fr/runs"
    [run_id] = [p.name for p in runs.iterdir()]
    folder = runs / run_id
    metrics = json.loads((folder / "metrics.json").read_text()) if (folder / "metrics.json").exists() else {}
    journal_path = folder / "metadata/placements.json"
    return {
        "rc": r.returncode,
        "wall_s": wall,
        "folder": folder,
        "metrics": metrics,
        "log": (folder / "log.txt").read_text(),
        "journal": json.loads(journal_path.read_text()) if journal_path.exists() else {},
        "stderr": r.stderr,
    }


def analyse(result: dict, market: dict, undisturbed: dict) -> dict:
    from trainer.runfiles.run_ids import run_started_at
    from trainer.runfiles.timestamps import parse_time

    speedup = market["speedup"]
    origin = run_started_at(result["folder"].name)
    market_preempted = sorted(t for t, text in stamped(result["log"]) if "spot market: Spot VM in" in text)
    journal = result["journal"]
    detections, back = [], []
    for p, fired_wall in zip(journal.get("preemptions", []), market_preempted):
        detections.append(parse_time(p["detected_at"]).timestamp() - fired_wall)
        if p.get("training_again_at"):
            back.append((parse_time(p["training_again_at"]).timestamp() - fired_wall) * speedup)
    false = 0
    for placed in journal.get("placements", []):
        if placed.get("outcome") == "no capacity" and placed.get("ended_at"):
            t = (parse_time(placed["ended_at"]).timestamp() - 1.0 - origin) * speedup
            # the move was decided creation_error_minutes of errors after the zone was last tried
            false += has_capacity(market, placed["zone"], t)
    ran = trainer_seconds(result["log"])
    same = result["metrics"].get("macro_f1") == undisturbed["metrics"].get("macro_f1") and [
        h.get("valid_loss") for h in result["metrics"].get("history", [])
    ] == [h.get("valid_loss") for h in undisturbed["metrics"].get("history", [])]
    return {
        "rc": result["rc"],
        "wall_s": round(result["wall_s"], 1),
        "market_h": round(result["wall_s"] * speedup / 3600, 2),
        "goodput": round(trainer_seconds(undisturbed["log"]) / ran, 3) if ran else None,
        "preemptions": len(journal.get("preemptions", [])),
        "moves": max(len(journal.get("placements", [])) - 1, 0),
        "detect_s_max": round(max(detections), 1) if detections else None,
        "back_wall_s_p50": round(statistics.median(back) / speedup, 1) if back else None,
        "back_market_s_p50": round(statistics.median(back)) if back else None,
        "back_market_s_p95": round(sorted(back)[max(0, math.ceil(0.95 * len(back)) - 1)]) if back else None,
        "capacity_wait_market_s": round(journal.get("capacity_wait_s", 0) * speedup),
        "false_recoveries": false,
        "macro_f1": result["metrics"].get("macro_f1"),
        "same_as_undisturbed": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    parser.add_argument("--speedup", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", type=Path, default=REPO / "data" / "sample" / "fr")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="trainctl --set, every run")
    args = parser.parse_args()
    sets = [a for s in args.sets for a in ("--set", s)]
    minutes = {
        "creation_error_minutes": 2 / args.speedup,
        "capacity_wait_minutes": 120 / args.speedup,
        "max_restarts": 100,
    }
    print(
        f"# spot_market: {platform.node()}, {platform.machine()}, python {platform.python_version()}, "
        f"speedup {args.speedup:g}, seed {args.seed}, data {args.data}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root, env = project(base, "undisturbed", args.data, None, {})
        undisturbed = run(root, env, sets)
        print(
            f"undisturbed: rc {undisturbed['rc']}, wall {undisturbed['wall_s']:.1f}s, "
            f"trainer {trainer_seconds(undisturbed['log']):.0f}s, macro-F1 {undisturbed['metrics'].get('macro_f1')}"
        )
        rows = []
        for name in args.profiles:
            market = draw_market(PROFILES[name], args.seed, speedup=args.speedup)
            root, env = project(base, name, args.data, market, minutes)
            row = {"profile": name, "rate_per_h": PROFILES[name], **analyse(run(root, env, sets), market, undisturbed)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        keys = list(rows[0])
        print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
        for row in rows:
            print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
