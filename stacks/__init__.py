"""trainstack's CDKTF app, stacks, config and the trainctl CLI."""
import os

# Node 20 is what our users run; jsii's end-of-life banner would drown our output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")
