"""Runs on the operator side, target-neutral: what `train`, `lm pretrain`, `destroy` and `gc` do to a stack and a run.

orchestrate.py the one way every command runs languages (one or many, side by side or in turn); runflow.py
one language's run end to end over its steps: preflight.py (before anything is created or billed), stack_ops.py
(synth and init, locks, apply, metadata, teardown, and `stack_run`, the one ended-run rule of train and gc),
watch.py (a run's live state, its log, following it), moves.py (following it where it is, moving it when its zone
has no capacity or preempted it: failover.py, ladder.py, zone_ranking.py), over stacks/terraform.py (the Terraform
runner); records.py
runs read back (`trainctl runs`, cost); promotion.py the model `predict` serves (<lang>/models/CURRENT).
"""
