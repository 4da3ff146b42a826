"""Bad input: one clear message, the documented exit code, nothing written under runs/."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from tests.support.project import SAMPLE

runner = CliRunner()


def bucket(project):
    return project / ".trainstack" / "local" / "bucket"


def stage(project, lang: str, raw: bytes):
    path = bucket(project) / lang / "data" / "train.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)


def assert_no_runs(project):
    assert not list(bucket(project).glob("*/runs/*")), "something was written under runs/"


def test_unknown_language(project):
    r = runner.invoke(app, ["train", "de"])
    assert r.exit_code == 2
    assert "language 'de' is not configured in env 'local' (configured: en, fr)" in r.output
    assert_no_runs(project)


def test_missing_train_csv(project):
    r = runner.invoke(app, ["train", "fr"])
    assert r.exit_code == 2 and "no labelled data at" in r.output and "trainctl data push fr" in r.output
    assert_no_runs(project)


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"", "is empty"),
        (b"body,labels\nx,a\n", "no column 'text'"),
        ("text,labels\nfa\xe7ture,a\nb,b\n".encode("latin-1"), "not UTF-8"),
    ],
)
def test_bad_train_csv(project, raw, message):
    stage(project, "fr", raw)
    r = runner.invoke(app, ["train", "fr"])
    assert r.exit_code == 2 and message in r.output
    assert "Traceback" not in r.output
    assert_no_runs(project)


def test_terraform_missing_is_exit_3(project, monkeypatch):
    stage(project, "fr", (SAMPLE / "fr" / "train.csv").read_bytes())
    monkeypatch.setenv("PATH", "/nonexistent")
    r = runner.invoke(app, ["train", "fr"])
    assert r.exit_code == 3
    assert "terraform is not on PATH" in r.output and "install Terraform" in r.output
    assert_no_runs(project)


def test_data_push_validates_and_never_overwrites(project, tmp_path):
    r = runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr")])
    assert r.exit_code == 0, r.output
    assert (bucket(project) / "fr/data/corpus/messages.txt").exists()
    changed = tmp_path / "train.csv"
    changed.write_text("text,labels\nmon colis,livraison\nma facture,facturation\n")
    r = runner.invoke(app, ["data", "push", "fr", str(changed)])
    assert r.exit_code == 2 and "--replace" in r.output
    assert (bucket(project) / "fr/data/train.csv").read_bytes() == (SAMPLE / "fr" / "train.csv").read_bytes()
    r = runner.invoke(app, ["data", "push", "fr", str(changed), "--replace"])
    assert r.exit_code == 0
    kept = list(bucket(project).glob("fr/data/previous/*/data/train.csv"))
    assert len(kept) == 1 and kept[0].read_bytes() == (SAMPLE / "fr" / "train.csv").read_bytes()


def test_three_versions_pushed_within_one_second_are_all_kept(project, tmp_path, monkeypatch):
    import datetime as dt

    from stacks.cli import data_cmd

    class FrozenClock(dt.datetime):  # every push in the same UTC second, as a fast script's are
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 11, 27, 12, 0, 0, tzinfo=tz)

    monkeypatch.setattr(data_cmd, "datetime", FrozenClock)
    versions = [f"text,labels\nmon colis {n},livraison\nma facture {n},facturation\n" for n in range(3)]
    for n, text in enumerate(versions):
        (tmp_path / "train.csv").write_text(text)
        r = runner.invoke(app, ["data", "push", "fr", str(tmp_path / "train.csv"), *(["--replace"] if n else [])])
        assert r.exit_code == 0, r.output
    kept = sorted(p.read_text() for p in bucket(project).glob("fr/data/previous/*/data/train.csv"))
    assert kept == sorted(versions[:2]), "an older version was overwritten by a later backup"
    assert (bucket(project) / "fr/data/train.csv").read_text() == versions[2]


def test_data_push_rejects_bad_csv_before_upload(project, tmp_path):
    bad = tmp_path / "train.csv"
    bad.write_text("texte,labels\nx,a\n")
    r = runner.invoke(app, ["data", "push", "fr", str(bad)])
    assert r.exit_code == 2 and "no column 'text'" in r.output
    assert not (bucket(project) / "fr").exists()


def test_status_without_runs(project):
    r = runner.invoke(app, ["status", "fr"])
    assert r.exit_code == 2 and "no run for fr" in r.output


@pytest.mark.parametrize(
    "lang, sets, message, hint",
    [
        ("gr", [], "'gr' is not an ISO 639-1 language code", "languages.gr.code: el"),
        ("gr", ["languages.gr.trainer.tokenizer=spacy"], "'gr' is not an ISO 639-1", "probably 'el'"),
        (
            "zh",
            ["languages.zh.trainer.tokenizer=spacy"],
            "the spacy tokenizer for 'zh'",
            "languages.zh.trainer.tokenizer: sentencepiece",
        ),
        ("bm", ["languages.bm.trainer.tokenizer=spacy"], "spaCy has no tokenizer for 'bm'", "sentencepiece"),
        # a known language key given an unknown code on the command line (xx, spaCy's multi-language code, is valid)
        ("fr", ["languages.fr.code=qq"], "'qq' is not an ISO 639-1 language code", "set languages.fr.code"),
    ],
)
def test_a_language_the_tokenizer_cannot_handle_stops_before_apply(project, lang, sets, message, hint):
    stage(project, lang, "text,labels\n我的包裹没有到 Το πακέτο,a\n发票错了 λάθος,b\n".encode())
    extra = [arg for s in sets for arg in ("--set", s)]
    r = runner.invoke(app, ["train", lang, "--set", f"languages.{lang}={{}}", *extra])
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert message in out and hint in out
    assert not (project / ".trainstack" / "local" / "state").exists(), "terraform ran before the tokenizer check"
    assert_no_runs(project)


def test_data_push_of_another_format_replaces_the_old_file_only_with_replace(project, tmp_path):
    assert runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr" / "train.csv")]).exit_code == 0
    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text(
        '{"text": "mon colis", "labels": ["livraison"]}\n{"text": "ma facture", "labels": "facturation"}\n'
    )
    r = runner.invoke(app, ["data", "push", "fr", str(jsonl)])
    assert r.exit_code == 2 and "train.csv" in r.output and "--replace" in r.output
    assert not (bucket(project) / "fr/data/train.jsonl").exists()
    r = runner.invoke(app, ["data", "push", "fr", str(jsonl), "--replace"])
    assert r.exit_code == 0, r.output
    assert (bucket(project) / "fr/data/train.jsonl").read_bytes() == jsonl.read_bytes()
    assert not (bucket(project) / "fr/data/train.csv").exists()
    kept = list(bucket(project).glob("fr/data/previous/*/data/train.csv"))
    assert len(kept) == 1 and kept[0].read_bytes() == (SAMPLE / "fr" / "train.csv").read_bytes()


def test_data_push_checks_label_columns_from_the_config(project, tmp_path):
    data = tmp_path / "train.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.Table.from_pylist(
            [
                {"text": "a", "toxic": 1, "insult": 0},
                {"text": "b", "toxic": 0, "insult": 1},
                {"text": "c", "toxic": 7, "insult": 0},
            ]
        ),
        data,
    )
    r = runner.invoke(app, ["data", "push", "fr", str(data), "--set", 'defaults.data.label_cols=["toxic","insult"]'])
    assert r.exit_code == 2 and "line 3" in r.output and "'toxic' holds 7" in r.output
    assert not (bucket(project) / "fr").exists()


def test_data_push_of_a_test_file_alone_and_a_warning_for_one_left_behind(project, tmp_path):
    test = tmp_path / "test.csv"
    test.write_text("text,labels\nmon colis,livraison\n")
    assert runner.invoke(app, ["data", "push", "fr", str(test)]).exit_code == 0
    assert (bucket(project) / "fr/data/test.csv").read_bytes() == test.read_bytes()
    r = runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr" / "train.csv")])
    assert r.exit_code == 0 and "test.csv from an earlier push stays" in " ".join(r.output.split())


def test_a_truncated_status_json_is_one_unreadable_row_not_an_outage(project):
    import json

    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    store = open_bucket(f"file://{bucket(project)}")
    write_status(store, RunStatus(run_id="20261127-100000-aaaa", lang="fr", env="local", state="SUCCEEDED"))
    write_status(store, RunStatus(run_id="20261127-110000-bbbb", lang="en", env="local", state="FAILED"))
    damaged = bucket(project) / "fr/runs/20261127-120000-cccc/status.json"
    damaged.parent.mkdir(parents=True)
    damaged.write_text('{"run_id": "20261127-120000-cccc", "lang": "fr", "sta')  # cut mid-write
    r = runner.invoke(app, ["runs", "--json"])
    assert r.exit_code == 0, r.output
    rows = {row["run_id"]: row for row in json.loads(r.output)}
    assert rows["20261127-100000-aaaa"]["state"] == "SUCCEEDED" and rows["20261127-110000-bbbb"]["state"] == "FAILED"
    bad = rows["20261127-120000-cccc"]
    assert bad["state"] == "UNREADABLE" and str(damaged) in bad["error"]
    r = runner.invoke(app, ["status", "fr", "--run", "20261127-120000-cccc"])
    assert r.exit_code == 2 and str(damaged) in r.output.replace("\n", ""), r.output


def test_logs_follow_of_a_run_that_never_started_says_so_and_returns(project):
    folder = bucket(project) / "fr/runs/20200101-000000-abcd"
    folder.mkdir(parents=True)
    (folder / "log.txt").write_text("2020-01-01T00:00:00Z the only line\n")
    r = runner.invoke(app, ["logs", "fr", "--run", "20200101-000000-abcd", "--follow"])
    assert r.exit_code == 0, r.output
    assert "the only line" in r.output and "not starting" in r.output and "nothing to follow" in r.output


def test_a_device_instead_of_data_and_an_upper_case_language_are_exit_2_with_the_next_step(project):
    r = runner.invoke(app, ["data", "push", "fr", "/dev/null"])
    assert r.exit_code == 2 and "neither a data file nor a folder" in r.output, r.output
    r = runner.invoke(app, ["status", "FR"])
    assert r.exit_code == 2 and "did you mean fr?" in r.output and "languages: {FR" not in r.output, r.output


def test_predict_with_a_failed_run_says_it_has_no_model(project):
    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    write_status(
        open_bucket(f"file://{bucket(project)}"),
        RunStatus(
            run_id="20261127-100000-ffff", lang="fr", env="local", state="FAILED", error="valid_pct left no rows"
        ),
    )
    r = runner.invoke(app, ["predict", "fr", "bonjour", "--run", "20261127-100000-ffff"])
    assert r.exit_code == 2 and "is FAILED: it has no model" in r.output and "gcloud" not in r.output, r.output


def test_a_resumed_run_sets_its_old_vm_notes_aside(project):
    from stacks.runs.stack_ops import set_aside_vm_notes
    from stacks.runs.watch import vm_startup_error
    from trainer.storage import open_bucket

    store = open_bucket(f"file://{bucket(project)}")
    run = "20261127-100000-aaaa"
    store.write_bytes(f"fr/runs/{run}/vm/dev-train-fr-x1-startup-error.txt", b"docker pull failed")
    assert vm_startup_error(store, "fr", run) == "docker pull failed"
    set_aside_vm_notes(store, "fr", run)
    assert vm_startup_error(store, "fr", run) is None
    assert (
        store.read_bytes(f"fr/runs/{run}/vm/before-resume/dev-train-fr-x1-startup-error.old") == b"docker pull failed"
    )


def test_runs_show_report_checks_its_path_before_work_and_never_overwrites(project, tmp_path):
    from trainer.runfiles.status_file import RunStatus, write_status
    from trainer.storage import open_bucket

    write_status(
        open_bucket(f"file://{bucket(project)}"),
        RunStatus(run_id="20261127-100000-aaaa", lang="fr", env="local", state="SUCCEEDED"),
    )
    show = ["runs", "show", "20261127-100000-aaaa", "--report"]
    for target, said in ((tmp_path, "is a folder"), (tmp_path / "missing" / "r.html", "no folder")):
        r = runner.invoke(app, [*show, str(target)])
        assert r.exit_code == 2 and said in r.output, r.output
    kept = tmp_path / "mine.html"
    kept.write_text("my notes")
    r = runner.invoke(app, [*show, str(kept)])
    assert r.exit_code == 2 and "--force" in r.output and kept.read_text() == "my notes"
    r = runner.invoke(app, [*show, str(kept), "--force"])
    assert r.exit_code == 0 and "<html" in kept.read_text().lower(), r.output


@pytest.mark.parametrize("target", ["/nonexistent/corpus.txt", "loop.txt"], ids=["dangling", "loop"])
def test_a_corpus_file_that_is_a_broken_link_is_refused_before_anything_is_staged(project, tmp_path, target):
    folder = tmp_path / "push"
    (folder / "corpus").mkdir(parents=True)
    (folder / "train.csv").write_bytes((SAMPLE / "fr" / "train.csv").read_bytes())
    (folder / "corpus" / "a.txt").write_text("du texte\n")
    (folder / "corpus" / "loop.txt").symlink_to(folder / "corpus" / "loop.txt")
    if target != "loop.txt":
        (folder / "corpus" / "b.txt").symlink_to(target)
    r = runner.invoke(app, ["data", "push", "fr", str(folder)], env={"COLUMNS": "400"})
    output = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in output and "unexpected" not in output, output
    assert "is a link to" in output and "point the link at the file, or remove it" in output
    assert not bucket(project).exists() or not list(bucket(project).rglob("*.*"))


def test_labels_that_differ_only_in_case_are_warned_about_when_pushed(project, tmp_path):
    rows = "".join(f"texte {i},{label}\n" for i, label in enumerate(["COMPTE", "compte", "livraison"] * 4))
    (tmp_path / "train.csv").write_text("text,labels\n" + rows)
    r = runner.invoke(app, ["data", "push", "fr", str(tmp_path / "train.csv")], env={"COLUMNS": "400"})
    output = " ".join(r.output.split())
    assert r.exit_code == 0, output
    assert "labels that differ only in case: COMPTE (4 rows) / compte (4 rows)" in output
