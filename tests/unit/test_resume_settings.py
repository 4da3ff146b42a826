"""`train LANG --resume RUN` keeps what the run computes and reads: settings that change the model, the data or
the trainer's arguments are refused before anything is applied, safe ones are recorded as changes, and a run
whose data is no longer its own is refused, saying where data push kept the versions it replaced."""

from __future__ import annotations

import json

import pytest

from stacks.errors import TrainstackError
from stacks.runs.language_run import resolve
from stacks.runs.resume_check import check_resume, record_changes
from tests.support.project import TINY_SETS
from trainer.storage import open_bucket

RUN = "20261127-100000-abcd"


def _run(project, *sets: str):
    from stacks.project import Project

    root = Project.discover()
    return resolve(root, root.load("local", [*TINY_SETS, *sets][1::2]), "fr")


def _started(project, *sets: str):
    """A stopped run of fr whose metadata/config.json holds the settings it started with."""
    run = _run(project, *sets)
    run.bucket.write_bytes(f"fr/runs/{RUN}/metadata/config.json", run.config.model_dump_json(indent=2).encode())
    return run


def test_a_resume_that_changes_the_model_or_the_data_is_refused_listing_each_difference(project):
    _started(project)
    resumed = _run(
        project,
        "--set",
        "defaults.trainer.n_hid=128",
        "--set",
        "defaults.trainer.epochs_clf=5",
        "--set",
        "languages.fr.data.text_col=body",
        "--set",
        "languages.fr.local.processes=2",
    )
    with pytest.raises(TrainstackError) as refused:
        check_resume(resumed, RUN)
    message = refused.value.message
    for difference in (
        "languages.fr.trainer.n_hid 64 -> 128",
        "languages.fr.trainer.epochs_clf 2 -> 5",
        'languages.fr.data.text_col "text" -> "body"',
        "languages.fr.local.processes 1 -> 2",
    ):
        assert difference in message, message
    assert "start a new run: trainctl train fr --env local" in refused.value.hint


def test_a_safe_change_is_recorded_as_a_change_and_the_settings_the_run_started_with_stay(project):
    started = _started(project)
    original = started.bucket.read_bytes(f"fr/runs/{RUN}/metadata/config.json")
    resumed = _run(project, "--set", "languages.fr.max_run_hours=12")
    changes = check_resume(resumed, RUN)
    assert changes == [("languages.fr.max_run_hours", 2.0, 12.0)]
    record_changes(resumed, RUN, changes)
    bucket = open_bucket(started.config.bucket)
    doc = json.loads(bucket.read_bytes(f"fr/runs/{RUN}/metadata/changes.json"))
    assert doc["changes"][0]["settings"] == [{"key": "languages.fr.max_run_hours", "from": 2.0, "to": 12.0}]
    assert (
        "settings changed by trainctl (--resume): languages.fr.max_run_hours 2.0 -> 12.0"
        in bucket.read_bytes(f"fr/runs/{RUN}/log.txt").decode()
    )
    assert bucket.read_bytes(f"fr/runs/{RUN}/metadata/config.json") == original
    assert check_resume(_run(project), RUN) == []  # the run's own settings: nothing to record


def test_a_targets_own_keys_are_safe_as_its_block_says_and_the_refusal_names_them(project):
    _started(project)
    changes = check_resume(_run(project, "--set", "languages.fr.local.cores=1"), RUN)
    assert changes == [("languages.fr.local.cores", 0, 1)]
    with pytest.raises(TrainstackError) as refused:
        check_resume(_run(project, "--set", "languages.fr.local.processes=2"), RUN)
    assert "max_run_hours" in refused.value.hint and "local.cores" in refused.value.hint, refused.value.hint


def test_a_run_recorded_before_the_target_blocks_is_compared_key_for_key(project):
    """A run started by a version that kept a target's keys at the top of a language (`processes`, `gpu`)."""
    run = _run(project)
    doc = json.loads(run.config.model_dump_json())
    flat = doc["languages"]["fr"]
    flat.update(flat.pop("local"))
    flat.update({"machine_type": "g2-standard-8", "gpu": {"type": "nvidia-l4", "count": 1}})
    run.bucket.write_bytes(f"fr/runs/{RUN}/metadata/config.json", json.dumps(doc).encode())
    with pytest.raises(TrainstackError, match=r"languages\.fr\.local\.processes 1 -> 2"):
        check_resume(_run(project, "--set", "languages.fr.local.processes=2"), RUN)
    assert check_resume(_run(project, "--set", "languages.fr.local.cores=1"), RUN) == [
        ("languages.fr.local.cores", 0, 1)
    ]


def test_a_run_whose_own_copy_of_its_data_is_gone_is_refused_naming_data_previous(project):
    run = _started(project)
    bucket = run.bucket
    bucket.write_bytes(f"fr/runs/{RUN}/data/train.csv", b"text,labels\nbonjour,compte\n")
    record = {"files": {"train.csv": {"size": 26, "md5": bucket.checksum(f"fr/runs/{RUN}/data/train.csv").md5}}}
    bucket.write_bytes(f"fr/runs/{RUN}/metadata/data.json", json.dumps(record).encode())
    assert check_resume(run, RUN) == []
    bucket.delete(f"fr/runs/{RUN}/data/train.csv")
    with pytest.raises(TrainstackError, match="cannot resume on the data it started with") as refused:
        check_resume(run, RUN)
    assert "train.csv" in refused.value.message and "fr/data/previous" in refused.value.hint


def test_a_run_from_before_runs_kept_their_data_is_refused_once_a_push_replaced_it(project):
    run = _started(project)
    bucket = run.bucket
    bucket.write_bytes(f"fr/runs/{RUN}/checkpoints/LATEST.ckpt.json", b"{}")
    bucket.write_bytes("fr/data/previous/20261127-095959.000000-aaaaaa/train.csv", b"before the run")
    assert check_resume(run, RUN) == []  # replaced before the run started: it trained on what is there now
    bucket.write_bytes("fr/data/previous/20261127-103000.000000-bbbbbb/train.csv", b"what the run trained on")
    with pytest.raises(TrainstackError, match="data push replaced its data") as refused:
        check_resume(run, RUN)
    assert "fr/data/previous/20261127-103000.000000-bbbbbb" in refused.value.message
