"""trainstack's CDKTF app, stacks, config and the trainctl CLI."""
import os

# Node 20 is what our users run; jsii's end-of-life banner would drown our output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")
# HashiCorp checkpoint (cdktf's and Terraform's telemetry) off for every cdktf/terraform call we
# make: it phones home on each run and prints `getaddrinfo ENOTFOUND` on machines without internet.
os.environ.setdefault("CHECKPOINT_DISABLE", "1")
