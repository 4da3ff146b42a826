"""What several synth test modules share: one synthesis of env dev, made once per session."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from tests.support.project import make_project

runner = CliRunner()
CI_SETS = ["ci.github_repository=acme/trainstack", "ci.github_repository_id=101", "ci.github_repository_owner_id=202"]
SETS = [
    *(a for s in CI_SETS for a in ("--set", s)),
    "--set",
    "gcp.project=p1",
    "--set",
    "languages.en.nodes=2",
    "--set",
    "languages.en.gcp.machine_type=g2-standard-24",
    "--set",
    "languages.en.gcp.gpu.count=2",
    "--set",
    "languages.en.spot=false",
    "--set",
    "languages.en.max_restarts_on_errors=2",
    "--set",
    "languages.en.restart_on_exit_codes=[75,137]",
    "--set",
    "gcp.kept_bucket=gs://p1-kept/trainstack",
]


def synth(root: Path, outdir: str) -> dict[str, dict]:
    result = runner.invoke(app, ["synth", "--env", "dev", *SETS, "--outdir", outdir])
    assert result.exit_code == 0, result.output
    return {p.parent.name: json.loads(p.read_text()) for p in (root / outdir / "stacks").glob("*/cdk.tf.json")}


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory):
    """(project root, stacks of out1, stacks of out2): `trainctl synth --env dev` twice (test_gcp_stacks checks
    they are byte-identical); en runs 2 on-demand nodes of g2-standard-24 with 2 L4s each, fr one Spot node."""
    root = make_project(tmp_path_factory.mktemp("gcp") / "proj")
    cwd = Path.cwd()
    os.chdir(root)
    try:
        first = synth(root, "out1")
        second = synth(root, "out2")
    finally:
        os.chdir(cwd)
    return root, first, second
