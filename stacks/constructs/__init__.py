"""What every target's stacks share: `train-<lang>` (train_stack.py) and the run id it fixes per apply
(run_identity.py). A target's own constructs live in its package (stacks/targets/<name>/). Importing a construct
loads the CDK (stacks/cdk.py)."""
