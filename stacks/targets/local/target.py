"""The local target: Terraform starts the trainer as a process on this machine; the bucket is a folder."""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from stacks.targets.base import TargetBase


@dataclass(frozen=True)
class LocalTarget(TargetBase):
    name: str = "local"
    status_appear_timeout_s: float = 180
    poll_s: float = 1.0
    stacks_before_training: tuple[str, ...] = ()
    runs_side_by_side: bool = False  # one machine: runs side by side split its cores (train --parallel N)

    def doctor(self, config, echo):
        checks = []
        for check in (_terraform_check, _node_check, _trainer_check, lambda: _bucket_check(config.bucket)):
            checks.append(check())
            echo(checks[-1])
        return checks, (
            "the data (checked by `trainctl data push LANG DIR` and when `trainctl train` starts) and the "
            "base LM (trainctl lm list)"
        )

    def runs_outlive_command(self, config) -> bool:
        return True  # the trainer's supervisor runs in a session of its own

    def training_part(self, spec, config, project, *, python, placement):
        from functools import partial

        from stacks.naming import stack_name
        from stacks.targets.local.host import LocalHost
        from stacks.targets.local.train_part import add_local_part

        name = stack_name(spec.lang)
        market = config.local.spot_market if spec.rung != "on_demand" else None  # on demand: always capacity
        zone = placement.zone if placement is not None else next(iter(market.zones)) if market else None
        host = LocalHost(
            python=python,
            workdir=project.root,
            procs_dir=project.procs_dir(config.env),
            state_file=project.state_file(config.env, name),
            cores_dir=project.cores_dir(),
            zone=zone,
            market=market.to_json(spec.rung) if market else None,
        )
        return partial(add_local_part, spec=spec, settings=config.language(spec.lang).local, host=host)

    def preflight_together(self, config, langs, reporter) -> dict:
        return {}  # the core ledger (trainer.launchers.local.cores) queues local runs that would not fit

    def side_by_side_sets(self, config, runs: int) -> list[str]:
        from trainer.launchers.local.cores import share

        return [f"defaults.local.cores={share(runs)}"]

    def preflight(self, config, lang, reporter, decided=None):
        """Without a simulated Spot market nothing to place; with one, its first zone."""
        return self.placements(config, lang, reporter)[0]

    def placements(self, config, lang, reporter, first=None, *, freed=False) -> list:
        """The simulated market's zones in order ([None]: no market, or on demand: one machine)."""
        from stacks.targets.local.host import LocalPlacement

        if not _in_market(config, lang):
            return [None]
        return [LocalPlacement(zone) for zone in config.local.spot_market.zones]

    def describe_placement(self, placement) -> str:
        return f"zone {placement.zone} (simulated)" if placement is not None else "this machine"

    def zones(self, config, lang) -> list[list[str]]:
        """The simulated market's zones, one tier ([]: no market, or on demand: one machine, nothing to rank)."""
        if not _in_market(config, lang):
            return []
        return [list(config.local.spot_market.zones)]

    def with_zone_order(self, config, lang, zones):
        market = config.local.spot_market
        if market is None or list(market.zones) == list(zones):
            return config
        ordered = market.model_copy(update={"zones": {zone: market.zones[zone] for zone in zones}})
        return config.model_copy(update={"local": config.local.model_copy(update={"spot_market": ordered})})

    def placement_of_run(self, config, lang, bucket, run_id):
        """The market zone the run's last placement went to (metadata/placements.json)."""
        from stacks.targets.local.host import LocalPlacement
        from trainer.runfiles.keys import PLACEMENTS_META, run_key
        from trainer.runfiles.readers import read_json

        if not _in_market(config, lang):
            return None
        journal = read_json(bucket, run_key(lang, run_id, PLACEMENTS_META)) or {}
        placed = [p.get("zone") for p in journal.get("placements", [])]
        return LocalPlacement(placed[-1]) if placed and placed[-1] in config.local.spot_market.zones else None

    def capacity_retry_s(self, config) -> tuple[float, float]:
        """Backoff between passes over every zone: as on gcp, in market seconds."""
        speedup = config.local.spot_market.speedup if config.local.spot_market else 1.0
        return 60 / speedup, 300 / speedup

    def vm_running(self, project, config, lang, run_id, placement) -> bool | None:
        """The group's view: is a trainer running (a late status.json is not a lost VM)?"""
        from trainer.launchers.local import supervisor

        state_dir = project.procs_dir(config.env) / run_id
        try:
            vm = (state_dir / supervisor.VM_FILE).read_text().strip()
        except OSError:
            return False
        return vm == "running" and supervisor.is_running(state_dir)

    def creation_errors(self, config, lang, reporter, *, placement=None, bucket=None, run_id=None, project=None):
        """With a simulated Spot market: the new tries of the run's launcher that found its zone dry."""
        if not _in_market(config, lang) or project is None or run_id is None:
            return None  # one machine: the supervisor's own status and exit code tell
        from trainer.launchers.market import FLEX_START_QUEUED, MarketRecord
        from trainer.runfiles.timestamps import now_iso

        record = MarketRecord(project.procs_dir(config.env) / run_id)
        zone = placement.zone if placement is not None else next(iter(config.local.spot_market.zones))
        since, seen = now_iso(), [0]

        def new() -> list[SimulatedError]:
            entries = record.creation_errors()
            fresh, seen[0] = entries[seen[0] :], len(entries)
            return [
                (QueuedRequest if e["code"] == FLEX_START_QUEUED else SimulatedError)(
                    e["zone"], e["code"], e["message"]
                )
                for e in fresh
                if e["zone"] == zone and e["timestamp"] >= since[:19]
            ]

        return new

    def launcher_alive(self, project, env, run_id):
        from trainer.launchers.local import supervisor

        state_dir = project.procs_dir(env) / run_id
        first_seen = time.monotonic()

        def alive() -> bool:
            if supervisor.read_pid(state_dir) is None:
                return time.monotonic() - first_seen < 30  # not started yet
            return supervisor.is_running(state_dir)

        return alive

    def run_cost(self, bucket, config, lang, run_id, status) -> dict:
        return {
            "machine_type": None,
            "gpu_type": None,
            "gpu_count": 0,
            "spot": None,
            "nodes": 1,
            "vm_boots": 0,
            "billed_vm_s": 0.0,
            "vm_per_hour": 0.0,
            "est_cost": 0.0,
            "cost_note": "local run",
            "prices_source": None,
        }

    def plan_line(self, plan):
        if plan.stack.startswith("train-") and plan.changes and all(c.type == "terraform_data" for c in plan.changes):
            return "runs as a local process on this machine (target local): no cloud cost"
        return None


LOCAL = LocalTarget()


@dataclass(frozen=True)
class SimulatedError:
    """A try of the simulated market that found no capacity (stacks.runs.watch.CreationProblem)."""

    zone: str
    code: str
    message: str
    kind: str = "capacity"
    hint: str = "the simulated market's zones are all dry: change `spot_market` in the env, or wait"

    def line(self) -> str:
        return f"VM creation failed in {self.zone}: {self.code}: {self.message}"


@dataclass(frozen=True)
class QueuedRequest(SimulatedError):
    """A flex-start request still waiting in its zone's queue: no VM yet, no error either."""

    hint: str = "no flex-start capacity came within flex_start_wait_minutes: raise it, or add on_demand to capacity"
    queued: bool = True

    def line(self) -> str:
        return f"no VM yet in {self.zone}: {self.message.removeprefix('simulated: ')} (simulated)"


def _in_market(config, lang: str) -> bool:
    """The language's VMs meet the simulated market (its zones, queues, preemptions): not on demand."""
    return config.local.spot_market is not None and config.language(lang).rung != "on_demand"


def _terraform_check():
    from stacks.targets.checks import Check
    from stacks.terraform import INSTALL_HINT, terraform_version

    path = shutil.which("terraform")
    if path is None:
        return Check("terraform", False, "not on PATH: stacks cannot be applied", INSTALL_HINT)
    return Check("terraform", True, f"{terraform_version(path) or 'unknown version'} at {path}")


def _node_check():
    from stacks.targets.checks import Check

    path = shutil.which("node")  # cdktf's Python runs the providers' bindings in Node (jsii)
    if path is None:
        return Check("node", False, "not on PATH: cdktf cannot synthesize the stacks", "install Node.js 20 or later")
    return Check("node", True, path)


def _trainer_check():
    import importlib.util

    from stacks.targets.checks import Check

    missing = [name for name in ("torch", "fastai", "sklearn") if importlib.util.find_spec(name) is None]
    if missing:
        return Check(
            "trainer packages",
            False,
            f"{', '.join(missing)} not installed in {sys.executable}",
            "make setup (README: the two commands)",
        )
    return Check("trainer packages", True, f"torch, fastai, scikit-learn in {sys.prefix}")


MIN_FREE_GIB = 2.0  # a base LM's token cache, checkpoints and a run's artifacts


def _bucket_check(uri: str):
    from stacks.targets.checks import Check

    root = Path(uri.removeprefix("file://"))
    existing = next((p for p in (root, *root.parents) if p.exists()), Path("/"))
    if existing != root:
        return _missing_bucket_check(f"bucket {uri}", root, existing)
    if not root.is_dir():
        return Check(f"bucket {uri}", False, "not a folder", "point `bucket:` in the env at a folder")
    if not os.access(root, os.W_OK):
        return Check(
            f"bucket {uri}",
            False,
            f"{root} is not writable by this user",
            "pick another `bucket:` in the env, or fix the folder's permissions",
        )
    free = shutil.disk_usage(root).free / 2**30
    if free < MIN_FREE_GIB:
        return Check(
            f"bucket {uri}",
            False,
            f"{free:.1f} GiB free on its disk, a run needs about {MIN_FREE_GIB:.0f}",
            "free some space (trainctl gc --env local removes ended runs' leftovers)",
        )
    return Check(f"bucket {uri}", True, f"writable, {free:.1f} GiB free")


def _missing_bucket_check(name: str, root: Path, existing: Path):
    """A bucket folder that is not there (a typo, a disk not mounted) is said to be missing, whatever the disk
    under it: fine where the first write can create it, a problem where it cannot."""
    from stacks.targets.checks import Check

    if not existing.is_dir():
        why = f"{existing} is not a folder"
    elif not os.access(existing, os.W_OK):
        why = f"{existing} is not writable by this user"
    else:
        free = shutil.disk_usage(existing).free / 2**30
        if free >= MIN_FREE_GIB:
            return Check(
                name,
                True,
                f"the folder does not exist yet: the first write creates it ({free:.1f} GiB free under {existing})",
            )
        why = f"{existing}, where it would be created, has {free:.1f} GiB free (a run needs about {MIN_FREE_GIB:.0f})"
    return Check(
        name,
        False,
        f"the folder does not exist, and {why}",
        f"create it (mkdir -p {root}, or mount its disk there), or point `bucket:` in the env at a folder that exists",
    )
