"""The CDKTF app: one `train-<lang>` stack per configured language (+ foundation on gcp).

`cdktf.json` runs `python -m stacks.app`, which reads TRAINCTL_ENV (default
`local`); `trainctl synth` calls `synth()` with the same config object.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from cdktf import App

from stacks.config import EnvConfig
from stacks.project import Project, stack_name
from stacks.train_stack import LocalHost, TrainStack


def interpreter() -> str:
    """This environment's python, spelled the same whether started as python or python3."""
    candidate = Path(sys.prefix) / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def build(app: App, config: EnvConfig, project: Project, python: str) -> dict[str, TrainStack]:
    stacks = {}
    for lang in config.languages:
        name = stack_name(lang)
        local = None
        if config.target == "local":
            local = LocalHost(python=python, workdir=project.root, procs_dir=project.procs_dir(config.env),
                              state_file=project.state_file(config.env, name))
        stacks[name] = TrainStack(app, name, config=config, lang=lang, local=local)
    return stacks


def synth(config: EnvConfig, project: Project, outdir: Path, python: str | None = None) -> list[str]:
    """Write <outdir>/stacks/<name>/cdk.tf.json for every stack; return the names."""
    app = App(outdir=str(outdir), skip_validation=False)
    stacks = build(app, config, project, python or interpreter())
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
