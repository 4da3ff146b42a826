"""A language's stack: synthesize and init it, lock it, apply it for a new run (or find the run it holds),
record the run's metadata, tear it down. `train`, `destroy` and `gc` share these steps and `stack_run`,
the one rule for whether the run a stack holds has ended."""
from __future__ import annotations

import fcntl
import json
import platform
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stacks.config import EnvConfig
from stacks.errors import InfraError
from stacks.naming import stack_name
from stacks.project import Project
from stacks.runs.preflight import language_settings
from stacks.runs.terraform import terraform_version
from stacks.runs.watch import Reporter, live_state
from stacks.targets import target_of
from trainer.records.runs import TRAINCTL_META, new_run_id, run_key
from trainer.storage import Bucket


@dataclass
class StackHandle:
    """A synthesized, initialised stack of one language (`placement`: gcp zone/image decision)."""

    config: EnvConfig
    project: Project
    lang: str
    tf: "object"
    placement: "object | None" = None

    @property
    def name(self) -> str:
        return stack_name(self.lang)


def synth_and_init(project: Project, config: EnvConfig, name: str, echo=None, placements=None):
    """Synthesize stack `name` and `terraform init` it -> its Terraform runner."""
    from stacks.runs.terraform import Terraform, terraform_binary

    terraform_binary()  # fail fast (exit 3) before the slower synth
    from stacks.app import synth

    outdir = project.work_outdir(config.env)
    synth(config, project, outdir, placements=placements, only={name})
    tf = Terraform(outdir / "stacks" / name, name, echo=echo)
    tf.init()
    return tf


def open_stack(project: Project, config: EnvConfig, lang: str, echo=None, *, preflight: bool = False,
               reporter: Reporter | None = None, decided=None) -> StackHandle:
    """Synthesize (after the gcp preflight when asked) and `terraform init` a language's stack."""
    from stacks.runs.terraform import terraform_binary

    language_settings(config, lang)
    terraform_binary()  # before the preflight's cloud calls too
    placement = target_of(config).preflight(config, lang, reporter, decided=decided) if preflight else None
    tf = synth_and_init(project, config, stack_name(lang), echo, {lang: placement} if placement else None)
    return StackHandle(config, project, lang, tf, placement)


def open_foundation(project: Project, config: EnvConfig, echo=None):
    """Synthesize and `terraform init` the foundation stack of a gcp env -> its Terraform runner."""
    from stacks.naming import FOUNDATION

    return synth_and_init(project, config, FOUNDATION, echo)


@contextmanager
def stack_lock(project: Project, env: str, stack: str):
    """One trainctl at a time per stack: the active-run check and the apply are one step."""
    path = project.env_dir(env) / "locks" / f"{stack}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InfraError(f"another trainctl is applying or destroying {stack} in env {env}",
                             hint="wait for it to finish, then rerun") from None
        yield


def active_run(handle: StackHandle) -> str | None:
    """The run id the stack currently holds, if it is applied."""
    run_id = handle.tf.outputs().get("run_id")
    return str(run_id) if run_id else None


def stack_run(handle: StackHandle, bucket: Bucket) -> tuple[str | None, str | None]:
    """(the run the stack was applied for, its live state): the one "ended run" rule of `train` (tear the
    stack down and start anew) and `gc` (destroy it). State None: the run has ended, or never will start."""
    current = active_run(handle)
    if not current:
        return None, None
    return current, live_state(bucket, handle.lang, current, target_of(handle.config).status_appear_timeout_s)


def write_run_metadata(bucket: Bucket, handle: StackHandle, run_id: str) -> None:
    stack_json = handle.project.work_outdir(handle.config.env) / "stacks" / handle.name / "cdk.tf.json"
    meta = {
        "env": handle.config.env, "lang": handle.lang, "run_id": run_id, "stack": handle.name,
        "git_sha": git_sha(handle.project.root), "host": platform.node(),
        "terraform": terraform_version(handle.tf.binary),
    }
    settings = handle.config.language(handle.lang)
    meta.update(target=handle.config.target, machine_type=settings.machine_type,
                gpu={"type": settings.gpu.type, "count": settings.gpu.count}, spot=settings.spot,
                nodes=settings.nodes, max_run_hours=settings.max_run_hours)
    if handle.placement is not None:
        from stacks.config.gpus import region_of

        region = region_of(handle.placement.zone)
        meta.update(image=handle.placement.image, zone=handle.placement.zone, region=region,
                    quota_metric=handle.placement.quota_metrics[0])
        try:  # bookkeeping after the apply: a pricing failure must not lose the run's metadata
            meta["cost_estimate"] = target_of(handle.config).estimate_record(handle.config, handle.lang, region, bucket)
        except Exception as exc:
            meta["cost_estimate"] = {"note": f"cost unknown: {exc}"}
    prefix = "metadata/"
    bucket.write_bytes(run_key(handle.lang, run_id, prefix + "config.json"),
                       handle.config.model_dump_json(indent=2).encode())
    bucket.write_bytes(run_key(handle.lang, run_id, prefix + "stack.json"), stack_json.read_bytes())
    bucket.write_bytes(run_key(handle.lang, run_id, TRAINCTL_META), json.dumps(meta, indent=2).encode())


def git_sha(root: Path) -> str | None:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    return out.stdout.strip() or None


def launch(handle: StackHandle, bucket: Bucket, reporter: Reporter) -> tuple[str, bool]:
    """Apply the stack for a new run, or return the active run. -> (run_id, attached)."""
    with stack_lock(handle.project, handle.config.env, handle.name):
        current, state = stack_run(handle, bucket)
        if current:
            if state is not None:
                reporter.info(f"a {handle.lang} run is already active in env {handle.config.env} "
                              f"({current}, {state}); following it instead of starting another")
                return current, True
            reporter.info(f"tearing down the ended run {current} left in {handle.name}")
            handle.tf.destroy({"run_id": current})
        run_id = new_run_id()
        reporter.info(f"applying {handle.name} (run {run_id})")
        handle.tf.apply({"run_id": run_id})
        write_run_metadata(bucket, handle, run_id)
        return run_id, False


def teardown(handle: StackHandle, run_id: str | None, reporter: Reporter) -> None:
    with stack_lock(handle.project, handle.config.env, handle.name):
        reporter.info(f"destroying {handle.name}")
        handle.tf.destroy({"run_id": run_id} if run_id else None)
