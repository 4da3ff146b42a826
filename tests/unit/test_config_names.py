"""Names refused where they enter the config: language keys, unknown keys, the shape of an overlay and --set.

Each refusal is a ConfigError (exit 2) naming the key and the file (or --set), with a next step."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.config import load_config
from stacks.errors import ConfigError

runner = CliRunner()


def overlay(project, name: str, text: str) -> None:
    (project / "envs" / f"{name}.yaml").write_text(text)


def refusal(project, env: str, overrides: list[str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(project / "envs", env, overrides)
    assert caught.value.hint, f"no next step: {caught.value.message}"
    return caught.value


@pytest.mark.parametrize("key", ["../../escape", "fr/x", "..", "fr\\x", "fr x", "-fr", "fr_ca", "1"])
def test_a_language_key_that_is_no_plain_name_is_refused_naming_key_and_file(project, key):
    # `code:` given: the key alone is wrong, never the language
    overlay(project, "mine", f"extends: local\nlanguages:\n  '{key}': {{code: fr}}\n")
    error = refusal(project, "mine")
    assert error.message.startswith("envs/mine.yaml: ") and repr(key) in error.message


def test_a_language_key_from_set_names_set(project):
    error = refusal(project, "local", ["languages.fr/x.code=fr"])
    assert error.message.startswith("--set: ") and "'fr/x'" in error.message
    assert "--set languages." in error.hint


@pytest.mark.parametrize(("key", "lower"), [("FR", "fr"), ("Fr-CA", "fr-ca")])
def test_an_upper_case_language_key_is_told_the_lower_case_one(project, key, lower):
    overlay(project, "mine", f"extends: local\nlanguages:\n  {key}: {{code: fr}}\n")
    error = refusal(project, "mine")
    assert error.message == f"envs/mine.yaml: {key}: language keys are lower case: use `{lower}`"
    assert "envs/mine.yaml" in error.hint


def test_yaml_reading_a_language_key_as_a_boolean_says_to_quote_it(project):
    # YAML 1.1 reads an unquoted `no` (Norwegian) as false
    overlay(project, "mine", "extends: local\nlanguages:\n  no: {}\n")
    error = refusal(project, "mine")
    assert error.message.startswith("envs/mine.yaml: ") and "'no'" in error.hint


def test_plain_language_keys_still_load_and_any_name_may_carry_a_code(project):
    overlay(project, "mine", "extends: local\nlanguages:\n  gr: {code: el}\n  fr-ca: {code: fr}\n  de2: {code: de}\n")
    assert {"gr", "fr-ca", "de2"} <= set(load_config(project / "envs", "mine").languages)


def test_a_bad_language_key_exits_2_with_the_next_step(project):
    overlay(project, "mine", "extends: local\nlanguages:\n  ../../escape: {code: fr}\n")
    result = runner.invoke(app, ["config", "show", "--env", "mine"])
    assert result.exit_code == 2, result.output
    assert "envs/mine.yaml" in result.output and "../../escape" in result.output
    assert "Traceback" not in result.output


def test_an_unknown_key_in_defaults_is_reported_once_with_a_close_match(project):
    overlay(project, "mine", "extends: local\ndefaults:\n  max_run_hour: 3\n")
    error = refusal(project, "mine")
    # not once more for each language defaults reach: the file has no languages.fr.max_run_hour
    assert error.message.count("max_run_hour'") == 1 and "languages." not in error.message
    assert error.message == (
        "envs/mine.yaml: unknown key 'defaults.max_run_hour' (did you mean defaults.max_run_hours?)"
    )


def test_unknown_keys_name_the_file_that_has_each(project):
    overlay(project, "mid", "extends: local\nlanguages:\n  fr: {trainer: {epoch_clf: 3}}\n")
    overlay(project, "mine", "extends: mid\ndefaults:\n  trainer: {bss: 3}\ntraget: gcp\n")
    error = refusal(project, "mine", ["languages.en.nodez=2"])
    lines = error.message.splitlines()[1:]
    assert sorted(line.strip() for line in lines) == sorted(
        [
            "envs/mid.yaml: unknown key 'languages.fr.trainer.epoch_clf' "
            "(did you mean languages.fr.trainer.epochs_clf?)",
            "envs/mine.yaml: unknown key 'defaults.trainer.bss' (did you mean defaults.trainer.bs?)",
            "envs/mine.yaml: unknown key 'traget' (did you mean target?)",
            "--set: unknown key 'languages.en.nodez' (did you mean languages.en.nodes?)",
        ]
    )


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("max_run_hours: 3", "defaults.max_run_hours"),
        ("nodes: 2", "defaults.nodes"),  # not `zones`
        ("bs: 8", "defaults.trainer.bs"),
        ("defaults: {epochs_clf: 3}", "defaults.trainer.epochs_clf"),
        ("uri: http://x", "tracking.mlflow.uri"),
    ],
)
def test_a_key_written_at_a_level_above_its_own_is_pointed_to_it(project, written, meant):
    overlay(project, "mine", f"extends: local\n{written}\n")
    assert f"(did you mean {meant}?)" in refusal(project, "mine").message


def test_an_unknown_key_like_no_other_says_so_without_a_guess(project):
    overlay(project, "mine", "extends: local\ndefaults:\n  zzzzzz: 1\n")
    assert refusal(project, "mine").message == "envs/mine.yaml: unknown key 'defaults.zzzzzz'"


@pytest.mark.parametrize(
    ("text", "found"), [("- target: local\n- bucket: x\n", "a list"), ("local\n", "a string"), ("3\n", "a number")]
)
def test_an_overlay_that_is_no_mapping_says_what_it_should_look_like(project, text, found):
    overlay(project, "mine", text)
    error = refusal(project, "mine")
    assert error.message.startswith("envs/mine.yaml: ") and found in error.message
    assert "key: value" in error.hint


@pytest.mark.parametrize("expr", ["project", "defaults..nodes=2", "=3"])
def test_a_set_that_is_no_assignment_shows_the_form(project, expr):
    error = refusal(project, "local", [expr])
    assert "--set key.path=value" in error.hint
    assert error.message.count("--set") == 1
