"""The targets an env may name, one line each: everything a target brings, named where it is (`module:object`,
in the target's own package). Its settings models are imported with the config's (every registered target's: a
package that cannot be imported stops every command), its code only when an env names it. Adding a target is one
line here plus its package (docs/design.md, "Adding a target")."""

from __future__ import annotations

import os
from typing import NamedTuple


class TargetEntry(NamedTuple):
    bucket_scheme: str  # the scheme of the env's `bucket:` (file, gs)
    code: str  # "package.module:OBJECT": the stacks.targets.Target
    settings: str | None = None  # "package.module:Model" of the env's block named after the target, if it has one
    language_settings: str | None = None  # "package.module:Model" of a language's block named after the target
    launcher: str | None = None  # the package that starts the trainer where the target runs it (its own code)
    bucket_opener: str | None = None  # "package.module:function" opening its scheme, if trainer.storage does not


TARGETS: dict[str, TargetEntry] = {
    "local": TargetEntry(
        "file",
        "stacks.targets.local.target:LOCAL",
        "stacks.targets.local.settings:LocalSettings",
        "stacks.targets.local.settings:LocalLanguageSettings",
        "trainer.launchers.local",
    ),
    "gcp": TargetEntry(
        "gs",
        "stacks.targets.gcp.target:GCP",
        "stacks.targets.gcp.settings:GcpSettings",
        "stacks.targets.gcp.settings:GcpLanguageSettings",
        "trainer.launchers.vm",
    ),
}


def export_bucket_openers() -> None:
    """Tell trainer.storage (in this process and the ones it starts) which function opens each target's own
    bucket scheme."""
    from trainer.storage import OPENERS_ENV

    openers = [f"{e.bucket_scheme}={e.bucket_opener}" for e in TARGETS.values() if e.bucket_opener]
    if openers:
        os.environ[OPENERS_ENV] = ",".join(openers)
