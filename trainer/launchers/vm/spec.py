"""What this VM has to run, read from the instance metadata the train stack writes."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from trainer.launchers.restarts import RestartPolicy
from trainer.launchers.run_spec import RunSpec
from trainer.launchers.trainer_process import TORCHRUN, one_machine_command
from trainer.launchers.vm import log
from trainer.launchers.vm.metadata import MetadataClient, MetadataError
from trainer.runfiles.run_ids import run_started_at

RDZV_PORT = 29500  # node 0's torchrun hosts the c10d rendezvous store here
# HOST:PORT of node 0's rendezvous store where the VMs do not reach each other by instance name (the simulated
# cloud's VMs share one host); absent on Compute Engine, where `<base>-0:RDZV_PORT` resolves on the VPC.
RDZV_ATTRIBUTE = "trainstack-rdzv-endpoint"
# How long torchrun waits for all nodes to (re)join: a preempted Spot VM comes back through
# the group (create, boot, driver, a multi-GB image pull), which takes minutes, not seconds.
JOIN_TIMEOUT_S = 1800
DEFAULT_MAX_RESTARTS = 3  # interruptions (preemptions) a multi-node run survives
# torch 2.x shares node 0's rendezvous store with the workers and publishes its address once
# per agent: a surviving rank-0 agent never republishes it for a recreated node, which then
# waits 60 s and takes the whole group down. Opting out makes every round publish it again.
RDZV_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


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
    max_restarts: int = DEFAULT_MAX_RESTARTS
    max_restarts_on_errors: int = 0  # trainer.launchers.restarts
    restart_on_exit_codes: tuple[int, ...] = ()
    # read by startup.sh before the agent runs (the agent keeps them for the boot record)
    image: str = ""
    shm_size: str = ""
    docker_flags: tuple[str, ...] = ()
    gpu_driver: str | None = None  # COS images: the version startup.sh installs
    kept_bucket: str | None = None  # where a work folder kept after failed uploads goes (trainer.launchers.vm.kept)
    rdzv_endpoint: str | None = None  # RDZV_ATTRIBUTE; None: node 0 by its instance name

    @classmethod
    def of(cls, spec: RunSpec, **vm) -> "VmSpec":
        """The VM's spec of a run (its RunSpec, with its run id) and what is the gcp target's own (`vm`)."""
        return cls(
            run_id=spec.run_id,
            lang=spec.lang,
            env=spec.env,
            bucket=spec.bucket,
            args=list(spec.trainer_args),
            nodes=spec.nodes,
            max_run_hours=spec.max_run_hours,
            max_restarts=spec.max_restarts,
            max_restarts_on_errors=spec.max_restarts_on_errors,
            restart_on_exit_codes=tuple(spec.restart_on_exit_codes),
            **vm,
        )

    @property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(self.max_restarts_on_errors, self.restart_on_exit_codes)

    @property
    def rendezvous(self) -> str:
        """Where the nodes meet: node 0's rendezvous store, HOST:PORT."""
        return self.rdzv_endpoint or f"{self.base_name}-0:{RDZV_PORT}"

    def to_metadata(self) -> dict[str, str]:
        """The trainstack-* instance attributes: what the train stack writes and this VM reads."""
        return {
            **({"trainstack-gpu-driver": self.gpu_driver} if self.gpu_driver else {}),
            **({"trainstack-kept-bucket": self.kept_bucket} if self.kept_bucket else {}),
            **({RDZV_ATTRIBUTE: self.rdzv_endpoint} if self.rdzv_endpoint else {}),
            "trainstack-image": self.image,
            "trainstack-run-id": self.run_id,
            "trainstack-args": json.dumps(list(self.args)),
            "trainstack-lang": self.lang,
            "trainstack-env": self.env,
            "trainstack-bucket": self.bucket,
            "trainstack-nodes": str(self.nodes),
            "trainstack-gpus-per-node": str(self.gpus_per_node),
            "trainstack-shm-size": self.shm_size,
            "trainstack-docker-flags": json.dumps(list(self.docker_flags)),
            "trainstack-max-run-hours": f"{self.max_run_hours:g}",
            "trainstack-max-restarts": str(self.max_restarts),
            "trainstack-max-restarts-on-errors": str(self.max_restarts_on_errors),
            "trainstack-restart-on-exit-codes": ",".join(map(str, self.restart_on_exit_codes)),
            "trainstack-project": self.project,
            "trainstack-zone": self.zone,
            "trainstack-mig": self.mig,
            "trainstack-base-name": self.base_name,
        }

    @classmethod
    def from_metadata(cls, md: MetadataClient) -> "VmSpec":
        """Reads the trainstack-* attributes; a missing or malformed one is a MetadataError."""
        try:
            args = json.loads(md.require("trainstack-args"))
            nodes = int(md.attribute("trainstack-nodes", "1"))
            gpus = int(md.attribute("trainstack-gpus-per-node", "1"))
            hours = float(md.require("trainstack-max-run-hours"))
            restarts = int(md.attribute("trainstack-max-restarts", str(DEFAULT_MAX_RESTARTS)))
            on_errors = int(md.attribute("trainstack-max-restarts-on-errors", "0"))
            codes = tuple(
                int(c) for c in (md.attribute("trainstack-restart-on-exit-codes") or "").split(",") if c.strip()
            )
            flags = json.loads(md.attribute("trainstack-docker-flags") or "[]")
        except ValueError as exc:
            raise MetadataError(f"malformed trainstack-* metadata: {exc}") from exc
        for key, value in (("args", args), ("docker-flags", flags)):
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                raise MetadataError(f"trainstack-{key} must be a JSON list of strings")
        endpoint = (md.attribute(RDZV_ATTRIBUTE) or "").strip() or None
        if endpoint is not None and not re.fullmatch(r"[^\s:]+:\d{1,5}", endpoint):
            raise MetadataError(f"{RDZV_ATTRIBUTE} must be HOST:PORT, not {endpoint!r}")
        if nodes < 1 or gpus < 1 or hours <= 0 or restarts < 0 or on_errors < 0:
            raise MetadataError(
                f"nodes={nodes}, gpus-per-node={gpus}, max-run-hours={hours:g} must be positive "
                f"and max-restarts={restarts}, max-restarts-on-errors={on_errors} not negative"
            )
        return cls(
            run_id=md.require("trainstack-run-id"),
            lang=md.require("trainstack-lang"),
            env=md.require("trainstack-env"),
            bucket=md.require("trainstack-bucket"),
            args=args,
            nodes=nodes,
            gpus_per_node=gpus,
            max_run_hours=hours,
            project=md.require("trainstack-project"),
            zone=md.require("trainstack-zone"),
            mig=md.require("trainstack-mig"),
            base_name=(md.attribute("trainstack-base-name") or "").strip(),
            max_restarts=restarts,
            max_restarts_on_errors=on_errors,
            restart_on_exit_codes=codes,
            image=md.attribute("trainstack-image") or "",
            shm_size=md.attribute("trainstack-shm-size") or "",
            docker_flags=tuple(flags),
            gpu_driver=md.attribute("trainstack-gpu-driver"),
            kept_bucket=md.attribute("trainstack-kept-bucket") or None,
            rdzv_endpoint=endpoint,
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
            raise MetadataError(
                f"cannot tell the node rank of {instance_name!r}: expected "
                f"'{spec.base_name or '<trainstack-base-name>'}-<rank>'"
            )
        rank = int(match.group(1))
    if rank >= spec.nodes:
        raise MetadataError(f"node rank {rank} is not below trainstack-nodes={spec.nodes}")
    return rank


def build_command(spec: VmSpec, rank: int, launcher: list[str] | None = None) -> list[str]:
    """`python -m trainer ARGS --run-id ID`, or under torchrun for more than one GPU in all.

    Several VMs meet through an elastic c10d rendezvous on node 0 (`spec.rendezvous`): when one is preempted
    the others' torchrun restarts its workers (at most max_restarts times) and waits up to
    JOIN_TIMEOUT_S for the group to recreate it, then all resume from the newest checkpoint.
    `launcher` replaces everything before ARGS (a test hook: a fake trainer).
    """
    if "--run-id" in spec.args:
        log("trainstack-args contains --run-id; the one from trainstack-run-id is appended and wins")
    from trainer.launchers.vm.kept import work_dir

    # A work folder of a known place: what failed to upload is copied from it before the VM goes.
    tail = [*spec.args, "--run-id", spec.run_id, "--work-dir", str(work_dir(spec.run_id))]
    if launcher is not None:
        return [*launcher, *tail]
    if spec.nodes == 1:
        return one_machine_command(spec.gpus_per_node, tail)
    procs = ["--nproc-per-node", str(spec.gpus_per_node)]
    # c10d ignores --node-rank (it ranks nodes itself); ours only says who hosts the store,
    # explicitly rather than by torch's hostname guess.
    conf = f"join_timeout={JOIN_TIMEOUT_S},is_host={int(rank == 0)}"
    return [
        *TORCHRUN,
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        spec.rendezvous,
        "--rdzv-id",
        spec.run_id,
        "--rdzv-conf",
        conf,
        "--nnodes",
        str(spec.nodes),
        *procs,
        "--max-restarts",
        str(spec.max_restarts),
        "-m",
        "trainer",
        *tail,
    ]


def command_env(spec: VmSpec) -> dict[str, str]:
    """Variables added to the trainer command's environment (see RDZV_ENV)."""
    return dict(RDZV_ENV) if spec.nodes > 1 else {}
