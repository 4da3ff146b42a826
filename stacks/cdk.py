"""The one place that names the CDK: CDKTF (`cdktf`, archived Dec 2025) or CDK Terrain (`cdktn`).

Both have the same API and synthesize the same JSON for our stacks (docs/research/cdk-terrain.md),
so the stacks import from here. TRAINSTACK_CDK=cdktf|cdktn picks one; unset: cdktf when it is
installed (the `cli` extra), else cdktn (the `cli-cdktn` extra). A provider's classes live with the target that
uses them (e.g. stacks/targets/gcp/cdk_google.py), so a synth loads only its own target's assembly.
"""

from __future__ import annotations

import importlib
import os
from importlib.util import find_spec

KINDS = ("cdktf", "cdktn")
KIND = os.environ.get("TRAINSTACK_CDK") or ("cdktf" if find_spec("cdktf") else "cdktn")
if KIND not in KINDS:
    raise ImportError(f"TRAINSTACK_CDK={KIND!r}: expected one of {', '.join(KINDS)}")
_core = importlib.import_module(KIND)

App = _core.App
DataResource = _core.DataResource
GcsBackend = _core.GcsBackend
ITerraformDependable = _core.ITerraformDependable
LocalBackend = _core.LocalBackend
LocalExecProvisioner = _core.LocalExecProvisioner
TerraformLocal = _core.TerraformLocal
TerraformOutput = _core.TerraformOutput
TerraformResourceLifecycle = _core.TerraformResourceLifecycle
TerraformStack = _core.TerraformStack
TerraformVariable = _core.TerraformVariable
Testing = _core.Testing
