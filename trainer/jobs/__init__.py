"""The trainer's jobs, each a sequence over the stages (trainer/stages/): `classifier` (classifier.py: the
ULMFiT run) and `pretrain-lm` (pretrain_lm.py: a base LM from a corpus). harness.py runs either under one
status, log and exit code. Their names are trainer.params.Job."""
