"""The config check refuses what a run would fail on later (the trainer's bounds read against their consumers,
the data columns, a Spot market that can never apply), and names the file or `--set` the bad value came from."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from trainer.cli import build_parser
from trainer.params import PARAMS

runner = CliRunner()


def config_show(*args: str):
    r = runner.invoke(app, ["config", "show", *args], env={"COLUMNS": "400"})
    return r, " ".join(r.output.split())


def write(project, name: str, text: str) -> None:
    (project / "envs" / name).write_text(text)


@pytest.mark.parametrize(
    "setting, said",
    [
        ("seed=-1", "seed: Input should be greater than or equal to 0"),
        ("seed=4294967296", "seed: Input should be less than or equal to 2147483647"),
        ("bs=100000", "bs: Input should be less than or equal to 4096"),
        ("drop_mult=3", "drop_mult: Input should be less than or equal to 2"),
        ("lr=.inf", "lr: Input should be a finite number"),
        ("checkpoint_minutes=.nan", "checkpoint_minutes: Input should be a finite number"),
    ],
)
def test_a_trainer_value_the_run_would_fail_on_is_refused_naming_set(project, setting, said):
    r, output = config_show("--set", f"defaults.trainer.{setting}")
    assert r.exit_code == 2 and f"--set: languages.fr.trainer.{said}" in output, output


@pytest.mark.parametrize(
    "name, value", [("seed", "-1"), ("bs", "4097"), ("drop_mult", "2.5"), ("lr", "inf"), ("progress_seconds", "nan")]
)
def test_the_trainer_refuses_the_same_values(name, value):
    with pytest.raises(SystemExit):
        build_parser().parse_args(
            ["--lang", "fr", "--bucket", "file:///b", "--run-id", "r", f"--{name.replace('_', '-')}", value]
        )


def test_every_float_parameter_refuses_what_is_not_a_number():
    floats = [name for name, p in PARAMS.items() if isinstance(p.default, float)]
    assert floats and all(PARAMS[name].problem(math.inf) == "must be a finite number" for name in floats)


@pytest.mark.parametrize(
    "sets, said",
    [
        (["defaults.data.text_col=labels"], "--set: languages.fr.data: Value error, data.text_col and data.label_col"),
        (
            ["defaults.data.label_cols=[a, text]"],
            "--set: languages.fr.data: Value error, data.text_col 'text' is also one of data.label_cols",
        ),
        (["defaults.data.text_col=yes"], "quote it (--set 'defaults.data.text_col=\"yes\"')"),
        (["languages=null"], "error: --set: no `languages` block"),
        (["languages=3"], "error: --set: `languages` must be a mapping"),
    ],
)
def test_data_columns_and_languages_a_run_cannot_use_are_refused(project, sets, said):
    r, output = config_show(*[arg for s in sets for arg in ("--set", s)])
    assert r.exit_code == 2 and said in output, output


SPOT = "extends: local-spot\nlocal:\n  spot_market:\n"


@pytest.mark.parametrize(
    "block, said",
    [
        (
            "    zones:\n      sim-a: {outages: [{start_s: 100, end_s: 50}]}\n      sim-b: {}\n",
            "an outage from 100 s to 50 s ends before it starts",
        ),
        (
            "    preemptions:\n      - {zone: sim-b, stage: clasifier}\n",
            "waits for stage 'clasifier', which no run has (stages: preparing, base_lm",
        ),
        ("    speedup: .inf\n", "local.spot_market.speedup: Input should be a finite number"),
        ('    zones:\n      "": {}\n      sim-b: {}\n', "zone '' is not a zone name"),
    ],
)
def test_a_spot_market_that_can_never_apply_is_refused_in_its_file(project, block, said):
    write(project, "market.yaml", SPOT + block)
    r, output = config_show("--env", "market")
    assert r.exit_code == 2 and "envs/market.yaml: local.spot_market" in output and said in output, output


def test_the_stages_a_preemption_may_name_are_the_trainers():
    from trainer.runfiles.status_file import RUN_STAGES
    from trainer.runtime.fitting import STAGES

    assert set(STAGES) <= set(RUN_STAGES)


# -- the file an error names ---------------------------------------------------------------------------------


def test_a_target_block_in_an_overlay_that_extends_another_is_reported_in_that_overlay(project):
    write(project, "cloudy.yaml", "extends: local\ngcp: {project: p}\n")
    r, output = config_show("--env", "cloudy")
    assert r.exit_code == 2 and "error: envs/cloudy.yaml: " in output and "target gcp" in output, output


def test_an_unknown_preemption_zone_in_a_child_overlay_is_reported_in_the_child(project):
    write(project, "child.yaml", SPOT + "    preemptions:\n      - {zone: sim-x, stage: classifier}\n")
    r, output = config_show("--env", "child")
    assert r.exit_code == 2 and "error: envs/child.yaml: local.spot_market" in output and "sim-x" in output, output


def test_a_block_check_of_a_set_value_names_set_not_base_yaml(project):
    r, output = config_show("--set", "defaults.trainer.max_lm_tokens=5")
    assert r.exit_code == 2 and "--set: languages.fr.trainer: Value error, max_lm_tokens 5" in output, output
    assert "envs/base.yaml" not in output


@pytest.mark.parametrize("uri", ["http//localhost:5000", "localhost:5000", "http://", "mlflow.example.com"])
def test_a_malformed_tracking_uri_is_a_config_error(project, uri):
    r = runner.invoke(app, ["runs", "export", "--set", f"tracking.mlflow.uri={uri}"], env={"COLUMNS": "400"})
    output = " ".join(r.output.split())
    assert r.exit_code == 2 and "--set: tracking.mlflow.uri" in output and "is not a tracking URI" in output, output


@pytest.mark.parametrize(
    "uri", ["http://127.0.0.1:5000", "https://mlflow.example.com/", "databricks", "sqlite:///m.db"]
)
def test_a_tracking_uri_of_any_form_mlflow_takes_loads(project, uri):
    from stacks.config import load_config

    assert load_config(project / "envs", "local", [f"tracking.mlflow.uri={uri}"]).tracking.mlflow.uri == uri


@pytest.mark.parametrize(
    "env, key, said",
    [
        ("local", "defaults.cores=1", "a target's settings sit in its own block now: defaults.local.cores"),
        ("local", "languages.fr.processes=2", "sit in its own block now: languages.fr.local.processes"),
        ("local", "spot_market={}", "a target's settings sit in its own block now: local.spot_market"),
        (
            "local",
            "defaults.machine_type=g2-standard-8",
            "a setting of target gcp (defaults.gcp.machine_type), which this env's target local does not read",
        ),
    ],
)
def test_a_targets_key_outside_its_block_is_told_its_place_or_that_this_target_does_not_read_it(
    project, env, key, said
):
    r, output = config_show("--env", env, "--set", key)
    assert r.exit_code == 2 and said in output, output
