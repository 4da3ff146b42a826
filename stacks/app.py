"""The CDKTF app: one `train-<lang>` stack per configured language (+ `foundation` on gcp).

`cdktf.json` runs `python -m stacks.app`, which reads TRAINCTL_ENV (default
`local`); `trainctl synth` calls `synth()` with the same config object.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from stacks.cdk import App, TerraformStack

from stacks.config import EnvConfig
from stacks.naming import stack_name
from stacks.project import Project
from stacks.constructs.train_stack import TrainStack
from stacks.targets.gcp.placement import GcpPlacement

def interpreter() -> str:
    """This environment's python, spelled the same whether started as python or python3."""
    candidate = Path(sys.prefix) / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def build(app: App, config: EnvConfig, project: Project, python: str,
          placements: dict[str, GcpPlacement] | None = None, only: set[str] | None = None) -> dict[str, TerraformStack]:
    """Add the environment's stacks (`only` these names, when given) to `app`; `placements`
    carries quota decisions (gcp)."""
    from stacks.naming import FOUNDATION
    from stacks.targets import target_of

    target = target_of(config)
    stacks: dict[str, TerraformStack] = {}
    if FOUNDATION in target.stacks_before_training and (only is None or FOUNDATION in only):
        from stacks.constructs.foundation_stack import FoundationStack

        stacks[FOUNDATION] = FoundationStack(app, config=config)
    for lang in config.languages:
        name = stack_name(lang)
        if only is not None and name not in only:
            continue
        host = target.stack_host(config, project, lang, python=python, placement=(placements or {}).get(lang))
        stacks[name] = TrainStack(app, name, config=config, lang=lang, **host)
    return stacks


def synth(config: EnvConfig, project: Project, outdir: Path, python: str | None = None,
          placements: dict[str, GcpPlacement] | None = None, only: set[str] | None = None) -> list[str]:
    """Write <outdir>/stacks/<name>/cdk.tf.json for every stack (or `only` these); return the names."""
    outdir.parent.mkdir(parents=True, exist_ok=True)  # cdktf's App creates one level only
    app = App(outdir=str(outdir), skip_validation=False)
    stacks = build(app, config, project, python or interpreter(), placements, only)
    app.synth()
    return sorted(stacks)


def main() -> None:
    """`cdktf synth|deploy` entry point: errors as one line and the documented exit code."""
    from stacks.errors import TrainstackError

    env = os.environ.get("TRAINCTL_ENV", "local")
    try:
        project = Project.discover()
        config = project.load(env)
        only = None
        from stacks.naming import FOUNDATION
        from stacks.targets import target_of

        if FOUNDATION in target_of(config).stacks_before_training:
            from stacks.constructs.foundation_stack import CI_KEYS

            if not all(getattr(config.ci, key) for key in CI_KEYS):
                # The training stacks deploy without CI identities; the foundation never trusts a default.
                only = {stack_name(lang) for lang in config.languages}
                print(f"note: stack foundation left out: set {', '.join('ci.' + k for k in CI_KEYS)} in "
                      f"envs/{env}.yaml to synthesize or deploy it", file=sys.stderr)
        app = App()  # the cdktf CLI passes the output folder through the context
        build(app, config, project, interpreter(), only=only)
        app.synth()
    except TrainstackError as exc:
        print(f"error: {exc.message}" + (f"\n  {exc.hint}" if getattr(exc, "hint", None) else ""), file=sys.stderr)
        sys.exit(int(exc.exit_status))


if __name__ == "__main__":
    main()
