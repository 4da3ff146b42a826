"""The hashicorp/google release the installed provider bindings were generated for, read without loading them
(a config check must not pay for the jsii assembly), and what flex-start needs of it."""

from __future__ import annotations

import os
import re
from importlib.util import find_spec

# FLEX_START in an instance template's scheduling.provisioning_model came with magic-modules PR #17417 (merged
# 2026-05-05, re-landing #16750) in a 7.x release; older releases create a STANDARD template instead
# (terraform-provider-google issue #24172): an on-demand VM billed at the list price, never a flex-start one.
FLEX_START_MAJOR = 7
_PACKAGES = {"cdktf": "cdktf_cdktf_provider_google", "cdktn": "cdktn_provider_google"}


def bindings_release() -> str | None:
    """ "6.50.0" for cdktf-cdktf-provider-google 16.x: the release its provider module's docs link; None if unknown."""
    kind = os.environ.get("TRAINSTACK_CDK") or ("cdktf" if find_spec("cdktf") else "cdktn")
    try:
        spec = find_spec(f"{_PACKAGES.get(kind, _PACKAGES['cdktf'])}.provider")
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.origin:
        return None
    with open(spec.origin, encoding="utf-8") as module:
        head = module.read(2000)
    match = re.search(r"hashicorp/google/(\d+\.\d+\.\d+)", head)
    return match.group(1) if match else None


def flex_start_problem() -> str | None:
    """Why these bindings cannot deploy the flex_start rung to Google; None where they can."""
    release = bindings_release()
    if release is not None and int(release.split(".")[0]) >= FLEX_START_MAJOR:
        return None
    return (
        f"the google provider bindings installed are for hashicorp/google {release or '(unknown release)'}, "
        f"which writes provisioning_model FLEX_START as a STANDARD (on-demand) instance template; flex-start "
        f"templates need a {FLEX_START_MAJOR}.x release carrying magic-modules PR #17417 (May 2026)"
    )
