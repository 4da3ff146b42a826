"""Benchmark: `trainctl train` in a simulated Spot market, against the undisturbed run with the same seed.

    .venv/bin/python -m benchmarks.spot_market [--profiles calm typical harsh] [--targets local-spot gcp-sim]
        [--speedup 30] [--seed 7] [--data data/sample/fr] [--workdir DIR] [--set KEY=VALUE ...]
    .venv/bin/python -m benchmarks.spot_market --policies [--profiles ...] [--seeds 40]   (benchmarks.capacity_policies)

Each profile is a market drawn from a seed after the public Spot GPU traces (skypilot-org/spot-traces,
"Can't Be Late", NSDI '24): preemptions as a Poisson process per zone (calm 0.1, typical 0.3, harsh 1.0 an
hour), each leaving its zone dry for a log-normal outage (median 0.4 h, long tail); the two zones of one
region fail together more often than zones of different regions (an outage of sim-a starts one in sim-b with
probability 0.43, one of sim-c with 0.14). Market time runs `--speedup` times wall time; the lifecycle's
windows are set in market minutes (creation_error_minutes 2, capacity_wait_minutes 120).

The same market runs on each target: local-spot (the local launcher's market, zones sim-a, sim-b, sim-c) and
gcp-sim (the simulated Google Cloud's scenario, its overrides: sim-a and sim-b as europe-west4-a and -b, sim-c as
the fallback europe-west1-b; the sim's clock starts with the command, the local market's with the run, within a
second of each other). The sim prints its preemptions unstamped: they are timed as trainctl's stderr brings them.

Per profile: wall time, goodput (training seconds of the undisturbed run / seconds a trainer process ran),
each preemption's detection delay (wall s from the market's preemption to `train` seeing it) and time to
training again (market s), moves, false recoveries (a move away from a zone that had capacity), the cost
`trainctl runs` reports (gcp: billed wall-clock VM time at the scenario's prices; local: none), and whether
the final figures equal the undisturbed run's on the same target.
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
import threading
import time
from pathlib import Path

from benchmarks.lifecycle import fresh_project

REPO = Path(__file__).resolve().parents[1]
TRAINCTL = str(Path(sys.prefix) / "bin" / "trainctl")
PROFILES = {"calm": 0.1, "typical": 0.3, "harsh": 1.0}  # preemptions per market hour and zone
ZONES = ("sim-a", "sim-b", "sim-c")  # a, b: one region; c: another
CORRELATED = {("sim-a", "sim-b"): 0.43, ("sim-a", "sim-c"): 0.14}
TARGETS = ("local-spot", "gcp-sim")
# gcp-sim: the market's zones as the simulated cloud's zones with an L4 and its quota, two in one region (the
# run's zones) and one in another (its fallback), tried in this order as sim-a, sim-b, sim-c are
GCP_ZONES = {"sim-a": "europe-west4-a", "sim-b": "europe-west4-b", "sim-c": "europe-west1-b"}
MARKET_ZONES = {gcp: zone for zone, gcp in GCP_ZONES.items()}
GCP_RUNS = "simulated-gcs/.cloudstorage/trainstack-gcp-sim/fr/runs"  # the sim's Cloud Storage, on disk
LOCAL_PREEMPTED = re.compile(r"spot market: Spot VM in (\S+) preempted")
SIM_STARTED = re.compile(r"simulated VM (\S+) in (\S+): running the VM agent")
SIM_PREEMPTED = re.compile(r"simulated VM (\S+): preempted")
CREATION_ERROR_MARKET_S = 120  # creation_error_minutes, in market time
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


def undisturbed_market(speedup: float) -> dict:
    return {"speedup": speedup, "zones": {z: {"outages": []} for z in ZONES}, "preemptions": []}


def gcp_overrides(market: dict) -> dict:
    """The market as `gcp.simulated.overrides`: the scenario's speedup, its zones' capacity windows and
    preemptions (lists replace the shipped scenario's, so only the market's own outages and preemptions hold)."""
    return {
        "speedup": market["speedup"],
        "zones": {GCP_ZONES[z]: {"outages": spec["outages"]} for z, spec in market["zones"].items()},
        "preemptions": [{**p, "zone": GCP_ZONES[p["zone"]]} for p in market["preemptions"]],
    }


def env_overlay(target: str, market: dict, env_sets: dict) -> dict:
    """The benchmark's env: `target` with the market in its own terms and the lifecycle's windows."""
    if target == "local-spot":
        return {
            "extends": "local",
            "bucket": "file://.trainstack/bench/bucket",
            "defaults": env_sets,
            "local": {"spot_market": market},
        }
    zones = [GCP_ZONES[z] for z in ZONES]
    return {
        "extends": "gcp-sim",
        "defaults": env_sets,
        "gcp": {"zones": zones[:2], "fallback_zones": zones[2:], "simulated": {"overrides": gcp_overrides(market)}},
    }


def has_capacity_between(market: dict, zone: str, start_s: float, end_s: float) -> bool:
    """No outage of `zone` overlaps [start_s, end_s] (market s)."""
    return not any(
        o["start_s"] <= end_s and (o.get("end_s") is None or start_s < o["end_s"])
        for o in market["zones"][zone]["outages"]
    )


def sim_preemptions(said: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """(wall s, zone) of each preemption the simulated cloud printed (its lines name the VM; the zone is where that
    VM last started)."""
    zone_of, fires = {}, []
    for t, text in said:
        if m := SIM_STARTED.match(text):
            zone_of[m[1]] = m[2]
        elif (m := SIM_PREEMPTED.match(text)) and m[1] in zone_of:
            fires.append((t, zone_of[m[1]]))
    return fires


def fired_before(fires: list[tuple[float, str]], zone: str, detected: float) -> float | None:
    """When the market's preemption that `train` saw at `detected` fired: the last in `zone` before it (a zone may
    preempt a VM that is already stopping; the journal's stamps are whole seconds)."""
    times = [t for t, z in fires if z == zone and t < detected + 1.0]
    return max(times) if times else None


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


def project(base: Path, name: str, data: Path, target: str, market: dict | None, env_sets: dict) -> tuple[Path, str]:
    """A project whose env `bench` is `target` in `market` (local-spot without one: the plain local env)."""
    root = fresh_project(base, name)
    env = "local"
    if market is not None:
        env = "bench"
        (root / "envs" / f"{env}.yaml").write_text(json.dumps(env_overlay(target, market, env_sets)))
    pushed = subprocess.run(
        [TRAINCTL, "data", "push", "fr", str(data.resolve()), "--env", env], cwd=root, capture_output=True, text=True
    )
    if pushed.returncode:
        raise SystemExit(f"data push failed:\n{pushed.stderr}")
    return root, env


def run(root: Path, env: str, target: str, sets: list[str]) -> dict:
    started = time.monotonic()
    proc = subprocess.Popen(
        [TRAINCTL, "train", "fr", "--env", env, *sets],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[tuple[float, str]] = []  # trainctl's stderr as it came, stamped on arrival (the sim's lines have none)
    reader = threading.Thread(target=lambda: said.extend((time.time(), line.rstrip("\n")) for line in proc.stderr))
    reader.start()
    proc.stdout.read()
    proc.wait()
    reader.join()
    wall = time.monotonic() - started
    (root / "trainctl-stderr.txt").write_text("".join(f"{t:.3f} {line}\n" for t, line in said))
    runs = root / ".trainstack" / env / (GCP_RUNS if target == "gcp-sim" else "bucket/fr/runs")
    [run_id] = [p.name for p in runs.iterdir()]
    folder = runs / run_id
    metrics = json.loads((folder / "metrics.json").read_text()) if (folder / "metrics.json").exists() else {}
    journal_path = folder / "metadata/placements.json"
    listed = subprocess.run([TRAINCTL, "runs", "--json", "--env", env], cwd=root, capture_output=True, text=True)
    [row] = [r for r in json.loads(listed.stdout or "[]") if r.get("run_id") == run_id] or [{}]
    return {
        "rc": proc.returncode,
        "target": target,
        "said": said,
        "cost": row.get("est_cost") if row.get("cost_note") != "local run" else None,
        "wall_s": wall,
        "folder": folder,
        "metrics": metrics,
        "log": (folder / "log.txt").read_text(),
        "journal": json.loads(journal_path.read_text()) if journal_path.exists() else {},
        "stderr": "\n".join(line for _, line in said),
    }


def analyse(result: dict, market: dict, undisturbed: dict) -> dict:
    from trainer.runfiles.run_ids import run_started_at
    from trainer.runfiles.timestamps import parse_time

    speedup = market["speedup"]
    if result["target"] == "gcp-sim":  # the sim's market starts with the command's simulated cloud
        origin = next(t for t, text in result["said"] if text.startswith("simulated Google Cloud at "))
        fires = sim_preemptions(result["said"])
    else:
        origin = run_started_at(result["folder"].name)
        fires = [(t, m[1]) for t, text in stamped(result["log"]) if (m := LOCAL_PREEMPTED.search(text))]
    journal = result["journal"]
    detections, back = [], []
    for p in journal.get("preemptions", []):
        detected = parse_time(p["detected_at"]).timestamp()
        fired_wall = fired_before(fires, p["zone"], detected)
        if fired_wall is None:
            continue
        detections.append(detected - fired_wall)
        if p.get("training_again_at"):
            back.append((parse_time(p["training_again_at"]).timestamp() - fired_wall) * speedup)
    false = 0
    for placed in journal.get("placements", []):
        if placed.get("outcome") == "no capacity" and placed.get("ended_at"):
            # decided on creation_error_minutes of errors up to ended_at (stamped to the second): false when the
            # zone had capacity all that while
            ended = (parse_time(placed["ended_at"]).timestamp() - origin) * speedup
            zone = MARKET_ZONES.get(placed["zone"], placed["zone"])
            false += has_capacity_between(market, zone, ended - CREATION_ERROR_MARKET_S, ended + speedup)
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
        "cost_usd": result["cost"],
        "macro_f1": result["metrics"].get("macro_f1"),
        "same_as_undisturbed": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--speedup", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", type=Path, default=REPO / "data" / "sample" / "fr")
    parser.add_argument("--workdir", type=Path, help="keep the projects here (default: a temporary folder)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="trainctl --set, every run")
    parser.add_argument(
        "--policies",
        action="store_true",
        help="instead: the capacity policies compared on --seeds markets per profile (benchmarks.capacity_policies)",
    )
    parser.add_argument("--seeds", type=int, default=40, help="--policies: markets drawn per profile")
    args = parser.parse_args()
    if args.policies:
        from benchmarks.capacity_policies import markdown, table

        print(f"# capacity policies: {args.seeds} markets per profile, python {platform.python_version()}")
        print(markdown(table(args.profiles, args.seeds)))
        return
    sets = [a for s in args.sets for a in ("--set", s)]
    minutes = {
        "creation_error_minutes": CREATION_ERROR_MARKET_S / 60 / args.speedup,
        "capacity_wait_minutes": 120 / args.speedup,
        "max_restarts": 100,
        "capacity": ["spot"],  # Spot alone: what this benchmark measures (the ladder: --policies)
    }
    print(
        f"# spot_market: {platform.node()}, {platform.machine()}, python {platform.python_version()}, "
        f"speedup {args.speedup:g}, seed {args.seed}, data {args.data}, targets {' '.join(args.targets)}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = args.workdir or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        undisturbed = {}
        for target in args.targets:  # local: the plain local env; gcp-sim: its scenario without outages
            market = None if target == "local-spot" else undisturbed_market(args.speedup)
            root, env = project(base, f"undisturbed-{target}", args.data, target, market, minutes)
            undisturbed[target] = done = run(root, env, target, sets)
            print(
                f"undisturbed {target}: rc {done['rc']}, wall {done['wall_s']:.1f}s, "
                f"trainer {trainer_seconds(done['log']):.0f}s, macro-F1 {done['metrics'].get('macro_f1')}, "
                f"cost {done['cost']}",
                flush=True,
            )
        rows = []
        for name in args.profiles:
            market = draw_market(PROFILES[name], args.seed, speedup=args.speedup)
            for target in args.targets:
                root, env = project(base, f"{name}-{target}", args.data, target, market, minutes)
                measured = analyse(run(root, env, target, sets), market, undisturbed[target])
                rows.append({"profile": name, "target": target, "rate_per_h": PROFILES[name], **measured})
                print(json.dumps(rows[-1]), flush=True)
        keys = list(rows[0])
        print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
        for row in rows:
            print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
