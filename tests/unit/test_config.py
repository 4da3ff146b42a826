"""Overlays, --set, per-language blocks and errors that name key and file."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.config import load_config
from stacks.errors import ConfigError

runner = CliRunner()


def write(project, name, text):
    (project / "envs" / name).write_text(text)


def test_local_overlay_merges_deeply(project):
    cfg = load_config(project / "envs", "local")
    fr = cfg.language("fr")
    assert cfg.target == "local"
    assert fr.trainer.emb_sz == 200  # from local.yaml
    assert fr.trainer.seq_len == 72  # from base.yaml, same mapping
    assert fr.data.label_sep == ";"


def test_a_new_base_lm_learns_at_its_own_rate_on_the_gpu_envs(project):
    """A new 400/1152/3 base LM stays at the unigram at lr_lm's 2e-2 (docs/BENCHMARKS.md "GPU"): the GPU envs
    pretrain at 5e-3 and fine-tune at 2e-2; the small local model keeps 2e-2 for both."""
    from stacks.config.trainer_command import trainer_args

    dev = load_config(project / "envs", "dev", ["gcp.project=p1"])
    local = load_config(project / "envs", "local")
    assert (dev.language("fr").trainer.lr_base_lm, dev.language("fr").trainer.lr_lm) == (5e-3, 2e-2)
    assert (local.language("fr").trainer.lr_base_lm, local.language("fr").trainer.lr_lm) == (2e-2, 2e-2)
    args = trainer_args(dev, "fr")
    assert args[args.index("--lr-base-lm") + 1] == "0.005"


def test_set_overrides_last_and_language_block_wins(project):
    write(
        project,
        "local.yaml",
        "target: local\nbucket: file://b\nlanguages:\n  fr: {trainer: {epochs_clf: 9}}\n  en: {}\n",
    )
    cfg = load_config(project / "envs", "local", ["languages.fr.trainer.bs=8", "defaults.trainer.bs=16"])
    assert cfg.language("fr").trainer.epochs_clf == 9
    assert cfg.language("fr").trainer.bs == 8
    assert cfg.language("en").trainer.bs == 16
    assert cfg.language("en").trainer.epochs_clf == 6


def test_lists_replace_instead_of_merging(project):
    cfg = load_config(project / "envs", "dev", ["gcp.project=p1", "gcp.zones=[europe-west4-b]"])
    assert cfg.gcp.zones == ["europe-west4-b"]


def test_unknown_key_names_key_and_file(project):
    write(project, "local.yaml", "target: local\nbucket: file://b\ndefaults:\n  trainer: {epoch_clf: 3}\n")
    with pytest.raises(ConfigError) as info:
        load_config(project / "envs", "local")
    assert "envs/local.yaml" in info.value.message
    assert "defaults.trainer.epoch_clf" in info.value.message or "trainer.epoch_clf" in info.value.message


def test_bad_value_from_set_names_set(project):
    with pytest.raises(ConfigError) as info:
        load_config(project / "envs", "local", ["languages.fr.trainer.epochs_clf=many"])
    assert info.value.message.startswith("--set: languages.fr.trainer.epochs_clf")


def test_missing_env_lists_available(project):
    with pytest.raises(ConfigError, match="available: dev, gcp-sim, local, local-spot, prod"):
        load_config(project / "envs", "staging")


def test_bucket_scheme_must_match_target(project):
    with pytest.raises(ConfigError, match="gs:// URI"):
        load_config(project / "envs", "dev", ["bucket=file:///tmp/x"])


def test_config_show_json_and_env_var(project, monkeypatch):
    monkeypatch.setenv("TRAINCTL_ENV", "dev")
    result = runner.invoke(app, ["config", "show", "--json", "--set", "gcp.project=p1"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["env"] == "dev" and data["gcp"]["project"] == "p1" and data["target"] == "gcp"


def test_config_show_error_exit_2(project):
    result = runner.invoke(app, ["config", "show", "--env", "nope"])
    assert result.exit_code == 2
    assert "unknown environment 'nope'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("name", ["bs", "valid_pct", "lr", "precision", "base_lm"])
def test_trainer_parameters_have_one_definition(name):
    """The config model and the trainer's flags come from trainer.params: same default, same refusals."""
    from stacks.config.models import TrainerSettings
    from trainer.cli import build_parser
    from trainer.params import PARAMS

    assert set(PARAMS) == set(TrainerSettings.model_fields) - {"job"}
    field = TrainerSettings.model_fields[name]
    assert field.default == PARAMS[name].default and field.description == PARAMS[name].help
    bad = {"bs": "0", "valid_pct": "1.0", "lr": "0", "precision": "fp8", "base_lm": "no spaces"}[name]
    with pytest.raises(ValueError):
        TrainerSettings(**{name: bad})
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(
            ["--lang", "fr", "--bucket", "file:///b", "--run-id", "r", f"--{name.replace('_', '-')}", bad]
        )


def test_trainer_run_settings_reach_the_trainer_and_bad_values_name_the_key(project):
    from stacks.config.trainer_command import trainer_args
    from trainer.cli import build_parser

    cfg = load_config(
        project / "envs",
        "local",
        ["languages.fr.local.processes=2", "defaults.trainer.precision=bf16", "defaults.trainer.deterministic=true"],
    )
    assert cfg.language("fr").local.processes == 2 and cfg.language("fr").max_restarts == 3
    args = build_parser().parse_args([*trainer_args(cfg, "fr"), "--run-id", "r"])
    assert (args.precision, args.deterministic, args.checkpoint_minutes) == ("bf16", True, 10.0)
    assert (
        build_parser()
        .parse_args([*trainer_args(load_config(project / "envs", "local"), "fr"), "--run-id", "r"])
        .deterministic
        is False
    )
    with pytest.raises(ConfigError, match="precision"):
        load_config(project / "envs", "local", ["defaults.trainer.precision=fp8"])


def test_a_whole_config_error_names_the_layer_that_set_the_key(project):
    """A check over several keys (no pydantic location) names the --set that broke it, not base.yaml."""
    with pytest.raises(ConfigError, match=r"^--set: .*bucket must be a gs:// URI"):
        load_config(project / "envs", "dev", ["gcp.project=p1", "bucket=file:///tmp/b"])
    # bucket from envs/local.yaml, target from --set: the latest layer is the one to look at
    with pytest.raises(ConfigError, match=r"^--set: .*bucket must be a gs:// URI"):
        load_config(project / "envs", "local", ["gcp.project=p1", "target=gcp"])
    # a dotted key the message names: the language came from --set, not from base.yaml
    with pytest.raises(ConfigError, match=r"^--set: .*languages.gr: 'gr' is not an ISO 639-1"):
        load_config(project / "envs", "local", ["languages.gr={}"])
    (project / "envs" / "odd.yaml").write_text("target: gcp\ngcp: {project: p1}\nbucket: file:///tmp/b\n")
    with pytest.raises(ConfigError, match=r"^envs/odd.yaml: .*bucket must be a gs:// URI"):
        load_config(project / "envs", "odd")


@pytest.mark.parametrize(
    ("env", "said"),
    [("base", "holds the defaults every env shares"), ("../envs/local", "not a plain name"), ("", "not a plain name")],
)
def test_an_env_is_a_plain_name_of_envs_never_base_or_a_path(project, env, said):
    with pytest.raises(ConfigError, match=said) as caught:
        load_config(project / "envs", env)
    assert "local" in caught.value.hint and "create envs/" not in caught.value.hint


def test_extends_names_an_env_of_envs_only(project):
    (project / "envs" / "mine.yaml").write_text("extends: ../envs/local\n")
    with pytest.raises(ConfigError, match="extends"):
        load_config(project / "envs", "mine")
    (project / "envs" / "mine.yaml").write_text("extends: local\nbucket: file://.trainstack/mine/bucket\n")
    assert load_config(project / "envs", "mine").bucket == "file://.trainstack/mine/bucket"


def test_a_key_written_twice_is_an_error_naming_both_lines(project):
    (project / "envs" / "twice.yaml").write_text(
        "extends: local\ndefaults:\n  max_run_hours: 1\n  cores: 1\n  max_run_hours: 3\n"
    )
    with pytest.raises(ConfigError, match="max_run_hours.*set twice.*lines 3 and 5") as caught:
        load_config(project / "envs", "twice")
    assert "envs/twice.yaml" in str(caught.value) and caught.value.hint


def test_an_old_overlay_with_flat_gcp_keys_names_their_new_place(project):
    (project / "envs" / "old.yaml").write_text(
        "target: gcp\nproject: p1\nregion: europe-west4\nzones: [europe-west4-a]\nbucket: gs://b\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(project / "envs", "old")
    lines = info.value.message.splitlines()[1:]
    assert [line.strip() for line in lines] == [
        f"envs/old.yaml: unknown key {key!r}: a target's settings sit in its own block now: gcp.{key}"
        for key in ("project", "region", "zones")
    ]
    with pytest.raises(ConfigError, match=r"^--set: unknown key 'project': .* block now: gcp.project$"):
        load_config(project / "envs", "dev", ["project=p1"])


def test_a_target_block_belongs_to_its_target(project):
    dev = load_config(project / "envs", "dev", ["gcp.project=p1"])
    assert (dev.gcp.project, dev.gcp.registry, dev.gcp.state_bucket_name) == (
        "p1",
        "trainstack",
        "p1-trainstack-tfstate",
    )
    assert load_config(project / "envs", "local").gcp is None
    with pytest.raises(ConfigError, match="gcp: settings of target gcp, but the env's target is local"):
        load_config(project / "envs", "local", ["gcp.project=p1"])
