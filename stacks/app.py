"""The CDKTF app: one `train-<lang>` stack per configured language (+ the stacks its target deploys first).

`cdktf.json` runs `python -m stacks.app`, which reads TRAINCTL_ENV (default
`local`); `trainctl synth` calls `synth()` with the same config object.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from stacks.cdk import App, TerraformStack
from stacks.config import EnvConfig
from stacks.config.trainer_command import run_spec
from stacks.constructs.train_stack import TrainStack
from stacks.naming import stack_name
from stacks.project import Project
from stacks.targets import target_of


def interpreter() -> str:
    """This environment's python, spelled the same whether started as python or python3."""
    candidate = Path(sys.prefix) / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def build(
    app: App,
    config: EnvConfig,
    project: Project,
    python: str,
    placements: dict[str, object] | None = None,
    only: set[str] | None = None,
) -> dict[str, TerraformStack]:
    """Add the environment's stacks (`only` these names, when given) to `app`; `placements` carries the target's
    placement decisions (gcp: the quota preflight's zone) per language."""
    target = target_of(config)
    stacks: dict[str, TerraformStack] = {}
    for name in target.stacks_before_training:
        if only is None or name in only:
            stacks[name] = target.before_training(app, config, name)
    for lang in config.languages:
        name = stack_name(lang)
        if only is not None and name not in only:
            continue
        spec = run_spec(config, lang)
        part = target.training_part(spec, config, project, python=python, placement=(placements or {}).get(lang))
        stacks[name] = TrainStack(app, name, config=config, lang=lang, part=part)
    return stacks


def synth(
    config: EnvConfig,
    project: Project,
    outdir: Path,
    python: str | None = None,
    placements: dict[str, object] | None = None,
    only: set[str] | None = None,
) -> list[str]:
    """Write <outdir>/stacks/<name>/cdk.tf.json for every stack (or `only` these); return the names."""
    outdir.parent.mkdir(parents=True, exist_ok=True)  # cdktf's App creates one level only
    app = App(outdir=str(outdir), skip_validation=False)
    stacks = build(app, config, project, python or interpreter(), placements, only)
    app.synth()
    return sorted(stacks)


def main() -> None:
    """`cdktf synth|deploy` entry point: errors as one line and the documented exit code."""
    from stacks.errors import TrainstackError
    from trainer.errors import print_error

    env = os.environ.get("TRAINCTL_ENV", "local")
    try:
        project = Project.discover()
        config = project.load(env)
        target = target_of(config)
        only = None
        left_out = target.left_out_of_app(config)
        if left_out:
            only = ({*target.stacks_before_training} - set(left_out)) | {stack_name(lang) for lang in config.languages}
            for name, why in left_out.items():
                print(f"note: stack {name} left out: {why}", file=sys.stderr)
        app = App()  # the cdktf CLI passes the output folder through the context
        build(app, config, project, interpreter(), only=only)
        app.synth()
    except TrainstackError as exc:
        print_error(exc.message, exc.hint)
        sys.exit(int(exc.exit_status))


if __name__ == "__main__":
    main()
