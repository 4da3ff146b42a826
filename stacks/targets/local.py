"""The local target: Terraform starts the trainer as a process on this machine; the bucket is a folder."""
from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class LocalTarget:
    name: str = "local"
    status_appear_timeout_s: float = 180
    poll_s: float = 1.0
    stacks_before_training: tuple[str, ...] = ()
    runs_side_by_side: bool = False  # one machine: runs side by side split its cores (train --parallel N)

    def check_config(self, config, origin) -> None:
        return None  # the schema's checks are all a local env needs

    def stack_host(self, config, project, lang, *, python, placement) -> dict:
        from stacks.naming import stack_name
        from stacks.constructs.train_stack import LocalHost

        name = stack_name(lang)
        return {"local": LocalHost(python=python, workdir=project.root, procs_dir=project.procs_dir(config.env),
                                   state_file=project.state_file(config.env, name), cores_dir=project.cores_dir())}

    def preflight_together(self, config, langs, reporter) -> dict:
        return {}  # the core ledger (trainer.launcher.cores) queues local runs that would not fit

    def preflight(self, config, lang, reporter, decided=None):
        return None  # nothing to place: the data preflight is the same on every target

    def estimate(self, config, lang, bucket, reporter) -> None:
        return None

    def waiting_note(self, config, lang, placement) -> str | None:
        return None

    def launcher_alive(self, project, env, run_id):
        from trainer.launcher import supervisor

        state_dir = project.procs_dir(env) / run_id
        first_seen = time.monotonic()

        def alive() -> bool:
            if supervisor.read_pid(state_dir) is None:
                return time.monotonic() - first_seen < 30  # not started yet
            return supervisor.is_running(state_dir)

        return alive

    def run_cost(self, bucket, config, lang, run_id, status) -> dict:
        return {"machine_type": None, "gpu_type": None, "gpu_count": 0, "spot": None, "nodes": 1, "vm_boots": 0,
                "billed_vm_s": 0.0, "vm_per_hour": 0.0, "est_cost": 0.0, "cost_note": "local run",
                "prices_source": None}

    def cost_note(self, cost: dict) -> str | None:
        return None

    def estimate_record(self, config, lang, region, bucket) -> dict:
        return {}

    def prices_for_plan(self, config):
        return None


LOCAL = LocalTarget()
