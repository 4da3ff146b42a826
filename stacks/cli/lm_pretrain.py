"""`trainctl lm pretrain`: a base-LM run through the same lifecycle as a training run."""
from __future__ import annotations

from typing import Annotated

import typer

from stacks.cli.common import EnvOpt, LangArg, SetOpt, mapped_errors


def register(app: typer.Typer) -> None:
    app.command("pretrain")(pretrain)


@mapped_errors
def pretrain(lang: LangArg, env: EnvOpt = "local", sets: SetOpt = None,
             detach: Annotated[bool, typer.Option("--detach", help="return once the stack is applied")] = False):
    """Pretrain a base LM on <lang>/data/corpus/ (GPU on gcp), publish <lang>/lm/<id>/ and point CURRENT at it.

    Apply, follow, destroy as `trainctl train`; the run checkpoints and resumes the same way.
    Epochs, arch and batch size come from trainer.epochs_base_lm, emb_sz/n_hid/n_layers, bs."""
    from stacks.cli.train_cmd import run_job

    run_job(lang, env, sets, detach, job="pretrain-lm")
