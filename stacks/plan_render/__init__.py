"""Readable Terraform plan reviews from `terraform show -json` output (no Terraform needed).

parse: plan JSON -> StackPlan; attributes: masked, hashed attribute diffs; training: GPUs,
zone and cost of a run; summary: verdict, table, destroy banner; markdown: the size budget;
review: `trainctl plan` / `apply --reviewed` (runs Terraform: imported only by those commands).
"""

from stacks.plan_render.markdown import GITHUB_COMMENT_LIMIT, render_markdown
from stacks.plan_render.parse import StackPlan, load_plan_file, load_plan_files, plan_from_document

__all__ = [
    "GITHUB_COMMENT_LIMIT",
    "StackPlan",
    "load_plan_file",
    "load_plan_files",
    "plan_from_document",
    "render_markdown",
]
