"""The targets an env may name, one line each: the bucket URI scheme its runs are stored in, and where its code
is (`module:object`, a package under stacks/targets/ implementing stacks.targets.Target, imported only when an
env names it). Adding a target is one line here plus its package (docs/design.md, "Adding a target")."""

from __future__ import annotations

from typing import NamedTuple


class TargetEntry(NamedTuple):
    bucket_scheme: str  # trainer.storage.open_bucket opens it
    code: str  # "package.module:OBJECT"
    settings: str | None = None  # "package.module:Model" of the env's block named after the target, if it has one
    language_settings: str | None = None  # "package.module:Model" of a language's block named after the target


TARGETS: dict[str, TargetEntry] = {
    "local": TargetEntry(
        "file",
        "stacks.targets.local.target:LOCAL",
        "stacks.targets.local.settings:LocalSettings",
        "stacks.targets.local.settings:LocalLanguageSettings",
    ),
    "gcp": TargetEntry(
        "gs",
        "stacks.targets.gcp.target:GCP",
        "stacks.targets.gcp.settings:GcpSettings",
        "stacks.targets.gcp.settings:GcpLanguageSettings",
    ),
}
