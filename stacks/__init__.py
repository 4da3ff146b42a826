"""trainstack's operator side (trainctl, config, run lifecycle, the CDKTF stacks): docs/design.md maps it."""

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
