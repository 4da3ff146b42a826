"""trainstack's operator side: the trainctl CLI, config, run lifecycle and the CDKTF stacks.

Where things are:
  cli/          trainctl: one module per command (group), each `register(app)`s itself; commands only render
  config/       envs/*.yaml as typed models (models.py) and their loader (loader.py)
  runs/         a run's way through a stack: orchestrate.py (the one path of every command that runs languages),
                runflow.py (one language start to end) over preflight.py, stack_ops.py (synth, apply,
                teardown, the ended-run rule) and watch.py (state, log, follow); terraform.py, records.py
                (runs read back, cost), promotion.py
  targets/      what differs per target, behind `target_of(config)`: gcp/ everything Google Cloud (api.py, quota,
                the GPU catalogue, prices and cost, image build, doctor and access checks, config checks,
                placement, the provider's CDK classes in cdk_google.py), local/ the local target
  app.py        the CDKTF app; constructs/ its stacks (train_stack.py, foundation_stack.py) and their
                constructs (one per file)
  cdk.py        the one import of the CDK (cdktf or cdktn)
  plan_render/  the plan review (Markdown for pull requests); review.py runs `plan`/`apply --reviewed`
  naming.py     resource and stack names; project.py the operator's project folder; errors.py exit statuses
"""
import os
from pathlib import Path

# The source tree trainstack runs from: VM scripts and the image build context live here
# (the operator's project folder may be elsewhere: project.Project.root).
SOURCE_ROOT = Path(__file__).resolve().parents[1]

# Node 20 is what our users run; jsii's end-of-life banner would drown our output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")
# HashiCorp checkpoint (cdktf's and Terraform's telemetry) off for every cdktf/terraform call we
# make: it phones home on each run and prints `getaddrinfo ENOTFOUND` on machines without internet.
os.environ.setdefault("CHECKPOINT_DISABLE", "1")
