"""The CDKTF app: one `train-<lang>` stack per configured language (+ `foundation` on gcp).

`cdktf.json` runs `python -m stacks.app`, which reads TRAINCTL_ENV (default
`local`); `trainctl synth` calls `synth()` with the same config object.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from cdktf import App, TerraformStack

from stacks.config import EnvConfig
from stacks.config.gpus import GPU_TYPES
from stacks.project import SOURCE_ROOT, Project, stack_name
from stacks.train_stack import GcpPlacement, LocalHost, TrainStack

VM_SCRIPTS = SOURCE_ROOT / "images" / "trainer"


def interpreter() -> str:
    """This environment's python, spelled the same whether started as python or python3."""
    candidate = Path(sys.prefix) / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def gcp_placement(config: EnvConfig, lang: str, zone: str | None = None, metric: str | None = None) -> GcpPlacement:
    """Where and what a language's VMs run; without a quota decision: the first preferred zone."""
    from stacks.gcp.image import image_ref

    s = config.language(lang)
    gpu = GPU_TYPES[s.gpu.type]
    return GcpPlacement(
        zone=zone or config.zones[0], image=image_ref(config, SOURCE_ROOT),
        quota_metrics=[metric] if metric else ([gpu.spot_metric, gpu.metric] if s.spot else [gpu.metric]),
        startup_script=(VM_SCRIPTS / "startup.sh").read_text(), shutdown_script=(VM_SCRIPTS / "shutdown.sh").read_text(),
    )


def build(app: App, config: EnvConfig, project: Project, python: str,
          placements: dict[str, GcpPlacement] | None = None) -> dict[str, TerraformStack]:
    """Add every stack of the environment to `app`; `placements` carries quota decisions (gcp)."""
    stacks: dict[str, TerraformStack] = {}
    if config.target == "gcp":
        from stacks.foundation_stack import FoundationStack

        stacks["foundation"] = FoundationStack(app, config=config)
    for lang in config.languages:
        name = stack_name(lang)
        if config.target == "local":
            local = LocalHost(python=python, workdir=project.root, procs_dir=project.procs_dir(config.env),
                              state_file=project.state_file(config.env, name))
            stacks[name] = TrainStack(app, name, config=config, lang=lang, local=local)
        else:
            placement = (placements or {}).get(lang) or gcp_placement(config, lang)
            stacks[name] = TrainStack(app, name, config=config, lang=lang, gcp=placement)
    return stacks


def synth(config: EnvConfig, project: Project, outdir: Path, python: str | None = None,
          placements: dict[str, GcpPlacement] | None = None) -> list[str]:
    """Write <outdir>/stacks/<name>/cdk.tf.json for every stack; return the names."""
    app = App(outdir=str(outdir), skip_validation=False)
    stacks = build(app, config, project, python or interpreter(), placements)
    app.synth()
    return sorted(stacks)


def main() -> None:
    env = os.environ.get("TRAINCTL_ENV", "local")
    project = Project.discover()
    config = project.load(env)
    app = App()  # the cdktf CLI passes the output folder through the context
    build(app, config, project, interpreter())
    app.synth()


if __name__ == "__main__":
    main()
