"""The CDKTF stacks and the constructs they compose, one construct per file (keyword-only arguments,
the resources it creates exposed as attributes). train_stack.py: `train-<lang>`, on the host its target
gives it (a local trainer process, or a GPU instance group); foundation_stack.py: what a gcp env shares
(registry, identities, CI federation, quota guard). Importing a construct loads the CDK (stacks/cdk.py)."""
