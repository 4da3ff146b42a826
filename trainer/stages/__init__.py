"""The trainer's stages, in the order a run meets them: prepare.py (data, splits, tokens) -> base_lm.py (the
base LM a run starts from) -> lm_finetune.py (the LM on the task's texts) -> classifier.py (gradual unfreezing,
the probe) -> evaluate.py (test figures, the TF-IDF baseline and blend) -> upload.py (model.pth, metrics.json,
predictions). The jobs (trainer/jobs/) sequence them; their parts are in lm/ and classification/."""
