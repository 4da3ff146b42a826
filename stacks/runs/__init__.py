"""Runs on the operator side, target-neutral: what `train`, `lm pretrain`, `destroy` and `gc` do to a stack and a run.

orchestrate.py the one way every command runs languages (one or many, side by side or in turn); runflow.py
one language's run end to end (preflight, apply, follow, destroy); lifecycle.py its steps (preflight, synth
and init, locks, apply and teardown, following a run's log); terraform.py the Terraform runner; records.py runs read back (`trainctl runs`, cost); promotion.py the model
`predict` serves (<lang>/models/CURRENT).
"""
