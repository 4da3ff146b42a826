"""The `classifier` job: ULMFiT's stages in run order (forward, then backward with trainer.bidirectional)."""

from __future__ import annotations

from trainer.runtime.context import RunContext
from trainer.runtime.fitting import Fitter
from trainer.stages import base_lm
from trainer.stages.classifier import train_classifier
from trainer.stages.evaluate import evaluate
from trainer.stages.lm_finetune import finetune
from trainer.stages.prepare import prepare
from trainer.stages.upload import upload


def run(rc: RunContext, fit: Fitter, started: float) -> None:
    """prepare -> base LM -> LM fine-tuning -> classifier (-> the backward pair); rank 0 evaluates and uploads."""
    prep = prepare(rc, fit)
    base = base_lm.stage(rc, fit, prep)
    fit.choose_base_lm(base)
    encoder = finetune(rc, fit, prep, base)
    clf = train_classifier(rc, fit, prep, encoder)
    bwd = None
    if rc.a.bidirectional:
        bwd = train_classifier(rc, fit, prep, finetune(rc, fit, prep, base, backwards=True, vocab=encoder.vocab))
    if rc.ctx.main:
        upload(rc, fit, prep, clf, bwd, evaluate(rc, prep, base, clf, bwd), started)
