"""The docs cannot rot silently: the map of docs/design.md matches the tree, relative links resolve."""

from __future__ import annotations

import re

from tests.support.project import REPO

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # [text](path) or [text](path#anchor)


def test_every_home_in_the_design_map_exists():
    text = (REPO / "docs" / "design.md").read_text()
    table = text[text.index("## The map") : text.index("## Environments")]
    homes = [
        p
        for row in table.splitlines()
        if row.startswith("| ") and "`" in row
        for p in re.findall(r"`([^`]+)`", row.split("|")[2])
    ]
    assert len(homes) >= 15
    assert not [home for home in homes if not (REPO / home).exists()]


SKIP = {".git", ".venv", ".venv-lint", ".venv-cdktn", "node_modules", ".trainstack", "cdktf.out", ".pytest_cache"}


def test_relative_links_in_the_docs_resolve():
    docs = [
        doc for doc in REPO.rglob("*.md") if not SKIP & set(doc.relative_to(REPO).parts) and "egg-info" not in str(doc)
    ]
    assert {REPO / "README.md", REPO / "docs/research/cdk-terrain.md", REPO / "data/sample/README.md"} <= set(docs)
    dead = []
    for doc in docs:
        for target in LINK.findall(doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (doc.parent / target).resolve()
            # outside the repository is dead in a user's clone (../shared is not there)
            if not path.is_relative_to(REPO) or not path.exists():
                dead.append(f"{doc.relative_to(REPO)} -> {target}")
    assert not dead, dead


def test_the_cli_reference_is_the_cli():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "docs" / "cli_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    rendered = reference.render()
    assert "## `trainctl train`" in rendered and "## `trainctl runs compare`" in rendered
    assert (REPO / "docs" / "cli.md").read_text() == rendered, (
        "docs/cli.md is not the CLI's: python docs/cli_reference.py > docs/cli.md"
    )


def _reference(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_config_reference_is_the_models_and_the_envs():
    reference = _reference("config_reference")
    doc = (REPO / "docs" / "config.md").read_text()
    assert "| `defaults.trainer.epochs_clf` |" in doc and "| `defaults.data.label_sep` |" in doc
    assert reference.rendered(doc) == doc, (
        "docs/config.md's settings are not the models' and envs': python docs/config_reference.py --write"
    )


SETTING = re.compile(r"`(?:languages\.[a-z]+\.|defaults\.)?((?:gcp\.gpu|trainer|data|gpu|ci)\.[a-z_]+)(?:[:=][^`]*)?`")


def test_every_setting_the_docs_name_exists():
    """A setting named in the docs (`trainer.x`, `data.x`, `languages.fr.trainer.x=...`) is one the models
    have; module names (trainer.runtime.heap) are told apart by the file they name."""
    from stacks.config.keys import optional_stripped
    from stacks.config.models import EnvConfig, LanguageSettings

    def leaves(model, prefix=""):
        for name, field in model.model_fields.items():
            kind = optional_stripped(field.annotation)
            if isinstance(kind, type) and hasattr(kind, "model_fields"):
                yield from leaves(kind, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"

    known = set(leaves(LanguageSettings)) | set(leaves(EnvConfig))
    docs = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    unknown, named = [], set()
    for doc in docs:
        if doc.name in ("DECISIONS.md", "BENCHMARKS.md"):  # records of their time; they name what was then
            continue
        for name in SETTING.findall(doc.read_text()):
            named.add(name)
            module = REPO / name.replace(".", "/")
            if name not in known and not module.with_suffix(".py").exists() and not module.is_dir():
                unknown.append(f"{doc.relative_to(REPO)}: {name}")
    assert len(named & known) >= 20 and not unknown, unknown


def test_the_doctor_roles_in_gcp_md_name_every_role_doctor_asks_for():
    """Whoever runs `trainctl doctor` meets the roles its own problems name (and the provider billing check's)."""
    checks = ("doctor.py", "deploy_checks.py", "lookups.py", "quota.py")
    asked = {
        role
        for name in checks
        for role in re.findall(r"roles/[\w.]+\w", (REPO / "stacks/targets/gcp" / name).read_text())
    }
    assert "roles/serviceusage.serviceUsageConsumer" in asked and len(asked) >= 4
    text = (REPO / "docs" / "gcp.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| check (`trainctl doctor`)"))
    bullet = text[text.index("- To check (`trainctl doctor`)") :]
    bullet = bullet[: bullet.index("\n- ") if "\n- " in bullet else len(bullet)]
    assert not [role for role in sorted(asked) if role not in row], row
    assert not [role for role in sorted(asked) if role not in bullet], bullet
