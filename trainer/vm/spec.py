"""What this VM has to run, read from the instance metadata the train stack writes."""
from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass

from trainer.runs import run_started_at
from trainer.vm import log
from trainer.vm.metadata import MetadataClient, MetadataError

MASTER_PORT = 29500


@dataclass(frozen=True)
class VmSpec:
    """The run and the group this VM belongs to."""

    run_id: str
    lang: str
    env: str
    bucket: str
    args: list[str]
    nodes: int
    gpus_per_node: int
    max_run_hours: float
    project: str
    zone: str
    mig: str
    base_name: str

    @classmethod
    def from_metadata(cls, md: MetadataClient) -> "VmSpec":
        """Reads the trainstack-* attributes; a missing or malformed one is a MetadataError."""
        try:
            args = json.loads(md.require("trainstack-args"))
            nodes = int(md.attribute("trainstack-nodes", "1"))
            gpus = int(md.attribute("trainstack-gpus-per-node", "1"))
            hours = float(md.require("trainstack-max-run-hours"))
        except ValueError as exc:
            raise MetadataError(f"malformed trainstack-* metadata: {exc}") from exc
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise MetadataError("trainstack-args must be a JSON list of strings")
        if nodes < 1 or gpus < 1 or hours <= 0:
            raise MetadataError(f"nodes={nodes}, gpus-per-node={gpus}, max-run-hours={hours:g} must be positive")
        return cls(
            run_id=md.require("trainstack-run-id"), lang=md.require("trainstack-lang"),
            env=md.require("trainstack-env"), bucket=md.require("trainstack-bucket"), args=args,
            nodes=nodes, gpus_per_node=gpus, max_run_hours=hours, project=md.require("trainstack-project"),
            zone=md.require("trainstack-zone"), mig=md.require("trainstack-mig"),
            base_name=(md.attribute("trainstack-base-name") or "").strip(),
        )

    def started_at(self) -> float:
        """Run start (epoch seconds) from the id's YYYYMMDD-hhmmss prefix; now if it has none."""
        start = run_started_at(self.run_id)
        if start is None:
            # A hand-made id: each boot then gets a full budget; the backstop in startup.sh does the same.
            log(f"run id {self.run_id!r} does not start with YYYYMMDD-hhmmss: max_run_hours counts from now")
            return time.time()
        return start

    def deadline(self) -> float:
        """When the run must stop (epoch seconds), whatever preemptions happened on the way."""
        return self.started_at() + self.max_run_hours * 3600


def node_rank(spec: VmSpec, instance_name: str, rank_attr: str | None = None) -> int:
    """0 on a single VM; else the `trainstack-rank` attribute or the `<base>-<rank>` name suffix."""
    if spec.nodes == 1:
        return 0
    if rank_attr is not None and rank_attr.strip().isdigit():
        rank = int(rank_attr)
    else:
        match = re.fullmatch(re.escape(spec.base_name) + r"-(\d+)", instance_name.split(".")[0])
        if not spec.base_name or not match:
            raise MetadataError(f"cannot tell the node rank of {instance_name!r}: expected "
                                f"'{spec.base_name or '<trainstack-base-name>'}-<rank>'")
        rank = int(match.group(1))
    if rank >= spec.nodes:
        raise MetadataError(f"node rank {rank} is not below trainstack-nodes={spec.nodes}")
    return rank


def build_command(spec: VmSpec, rank: int, launcher: list[str] | None = None) -> list[str]:
    """`python -m trainer ARGS --run-id ID`, or under torchrun for more than one GPU in all.

    `launcher` replaces everything before ARGS (a test hook: a fake trainer).
    """
    if "--run-id" in spec.args:
        log("trainstack-args contains --run-id; the one from trainstack-run-id is appended and wins")
    tail = [*spec.args, "--run-id", spec.run_id]
    if launcher is not None:
        return [*launcher, *tail]
    if spec.nodes * spec.gpus_per_node == 1:
        return [sys.executable, "-m", "trainer", *tail]
    procs = ["--nproc-per-node", str(spec.gpus_per_node)]
    if spec.nodes == 1:
        # One VM: no other node to meet, and this VM is not necessarily named <base>-0.
        return ["torchrun", "--standalone", "--nnodes", "1", *procs, "-m", "trainer", *tail]
    return ["torchrun", "--nnodes", str(spec.nodes), "--node-rank", str(rank), *procs,
            "--master-addr", f"{spec.base_name}-0", "--master-port", str(MASTER_PORT), "-m", "trainer", *tail]
