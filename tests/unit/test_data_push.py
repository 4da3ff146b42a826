"""`trainctl data push` on large files: each file read a chunk at a time for its check (its checksum taken on the
way), uploaded from disk a chunk at a time with its progress shown, and "unchanged" told by the bucket object's
checksum, never by reading the bucket's copy."""

from __future__ import annotations

import contextlib
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

from typer.testing import CliRunner

from stacks.cli.main import app
from tests.support.project import SAMPLE
from trainer.storage import LocalBucket

runner = CliRunner()
DATA = SimpleNamespace(text_col="text", label_col="labels", label_sep=";", task="auto", label_cols=[])


def push(*args: str):
    return runner.invoke(app, ["data", "push", "fr", *map(str, args)])


def train_csv(path: Path, size: int) -> Path:
    """A labelled CSV of about `size` bytes, five labels."""
    row = "mon colis est arrivé en retard et la facture contient une erreur,{}\n"
    labels = ["livraison", "facturation", "compte", "produit", "remboursement"]
    n = size // len(row.format("livraison").encode())
    path.write_text("text,labels\n" + "".join(row.format(labels[i % 5]) for i in range(n)), encoding="utf-8")
    return path


def gs_args(tmp_path) -> list[str]:
    return ["--env", "dev", "--set", "gcp.project=p1", "--set", f"bucket=gs://test-bucket/push-{tmp_path.name}"]


def test_a_push_holds_no_more_of_a_large_file_than_of_a_small_one(project, tmp_path):
    small, large = train_csv(tmp_path / "small.csv", 20_000), train_csv(tmp_path / "large.csv", 8_000_000)
    peaks = {}
    for name, src, args in (("small", small, []), ("large", large, ["--replace"])):
        tracemalloc.start()
        try:
            result = push(src, *args)
            peaks[name] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert result.exit_code == 0, result.output
    assert "staged fr/data/train.csv (8.0 MB)" in result.output
    assert peaks["large"] - peaks["small"] < 2_000_000, peaks  # the file is 8 MB


def test_an_unchanged_file_is_told_by_checksum_never_by_reading_the_bucket_s_copy(project, monkeypatch):
    assert push(SAMPLE / "fr").exit_code == 0

    def never(self, key, *args):
        raise AssertionError(f"read the bucket's {key}")

    for method in ("read_bytes", "open_read", "download"):
        monkeypatch.setattr(LocalBucket, method, never)
    result = push(SAMPLE / "fr")
    assert result.exit_code == 0, result.output
    assert "unchanged fr/data/train.csv" in result.stdout and "unchanged fr/data/corpus/messages.txt" in result.stdout


def test_on_gs_an_unchanged_file_costs_a_look_at_its_metadata_not_a_download(project, gcs_env, gcs_proxy, tmp_path):
    assert push(SAMPLE / "fr", *gs_args(tmp_path)).exit_code == 0
    gcs_proxy.requests.clear()
    result = push(SAMPLE / "fr", *gs_args(tmp_path))
    assert result.exit_code == 0, result.output
    assert "unchanged fr/data/train.csv" in result.stdout
    downloads = [s.target for s in gcs_proxy.requests if "alt=media" in s.target]
    assert not downloads and gcs_proxy.requests, downloads


def test_on_gs_an_object_without_md5_is_compared_by_its_crc32c(project, gcs_env, gcs_proxy, tmp_path, monkeypatch):
    """Cloud Storage keeps no md5 of a composite object; the emulator gives one for every object, so it is
    taken away here: crc32c, which every object has, decides."""
    from google.cloud.storage.blob import Blob

    monkeypatch.setattr(Blob, "md5_hash", property(lambda self: None, Blob.md5_hash.fset))
    assert push(SAMPLE / "fr" / "train.csv", *gs_args(tmp_path)).exit_code == 0
    gcs_proxy.requests.clear()
    result = push(SAMPLE / "fr" / "train.csv", *gs_args(tmp_path))
    assert result.exit_code == 0 and "unchanged fr/data/train.csv" in result.stdout, result.output
    assert not [s for s in gcs_proxy.requests if "alt=media" in s.target]
    changed = tmp_path / "train.csv"
    changed.write_bytes((SAMPLE / "fr" / "train.csv").read_bytes() + b"un texte de plus,livraison\n")
    result = push(changed, *gs_args(tmp_path))
    assert result.exit_code == 2 and "1 file(s) already in the bucket differ" in result.output


def test_checksums_with_no_digest_in_common_fall_back_to_comparing_the_bytes(project, tmp_path, monkeypatch):
    from trainer.storage.checksums import Checksum

    assert push(SAMPLE / "fr" / "train.csv").exit_code == 0
    monkeypatch.setattr(LocalBucket, "checksum", lambda self, key: Checksum() if self.exists(key) else None)
    result = push(SAMPLE / "fr" / "train.csv")
    assert result.exit_code == 0 and "unchanged fr/data/train.csv" in result.stdout, result.output
    changed = tmp_path / "train.csv"
    changed.write_bytes((SAMPLE / "fr" / "train.csv").read_bytes() + b"un texte de plus,livraison\n")
    result = push(changed)
    assert result.exit_code == 2 and "1 file(s) already in the bucket differ" in result.output


class Recorder:
    """A PushListener that keeps what it hears: lines, warnings, each file's bytes sent."""

    def __init__(self):
        self.lines, self.warnings, self.sent = [], [], {}

    def say(self, line):
        self.lines.append(line)

    def warn(self, text):
        self.warnings.append(text)

    @contextlib.contextmanager
    def progress(self, total_bytes):
        recorder = self

        class Files:
            @contextlib.contextmanager
            def file(self, name, size):
                recorder.sent[name] = []
                yield recorder.sent[name].append

        yield Files()


def test_a_large_upload_moves_the_progress_as_its_chunks_go(tmp_path):
    from stacks.datasets.push import push_data

    src = train_csv(tmp_path / "train.csv", 3_000_000)
    heard = Recorder()
    report = push_data(
        "fr", src, data_settings=DATA, bucket_uri=f"file://{tmp_path / 'bucket'}", replace=False, listener=heard
    )
    sent = heard.sent["fr/data/train.csv"]
    assert len(sent) > 3 and sent == sorted(sent) and sent[-1] == src.stat().st_size
    assert report.files["fr/data/train.csv"]["action"] == "uploaded"
    assert heard.lines[-2:] == [
        "staged fr/data/train.csv (3.0 MB)",
        f"uploaded 1 file(s), 0 unchanged, to file://{tmp_path / 'bucket'}/fr",
    ]


def test_without_a_terminal_a_long_upload_says_the_bytes_it_has_sent(capsys):
    from stacks.cli.file_progress import FileProgress

    with FileProgress(3_000_000, every_s=0.1) as progress:
        with progress.file("fr/data/train.csv", 3_000_000) as sent:
            sent(1_200_000)
            time.sleep(0.35)
    said = capsys.readouterr().out.splitlines()
    assert said and all(
        line.startswith("  still staging fr/data/train.csv: ") and line.endswith("s, 1.2 MB of 3.0 MB") for line in said
    ), said


def test_on_a_terminal_the_bar_moves_with_the_bytes_sent(monkeypatch):
    import io

    from rich.console import Console

    from stacks.cli import file_progress

    monkeypatch.setattr(file_progress, "console", Console(file=io.StringIO(), force_terminal=True))
    with file_progress.FileProgress(5_000) as progress:
        with progress.file("fr/data/train.csv", 2_000) as sent:
            sent(1_500)
            assert progress._bar.tasks[0].completed == 1_500
        with progress.file("fr/data/valid.csv", 3_000) as sent:
            sent(1_000)
            assert progress._bar.tasks[0].completed == 3_000


class ChangesTheFile(Recorder):
    """A listener that appends a row to `path` when it hears `when(line)`, or as the upload of `path` starts
    (`at_upload`): a user's editor saving at the worst moment, at a point of the push's own."""

    def __init__(self, path: Path, when=None, at_upload: bool = False):
        super().__init__()
        self.path, self.when, self.at_upload = path, when, at_upload

    def change(self):
        with self.path.open("ab") as fh:
            fh.write(b"un texte ajout\xc3\xa9 pendant le push,livraison\n")

    def say(self, line):
        super().say(line)
        if self.when is not None and self.when(line):
            self.change()

    @contextlib.contextmanager
    def progress(self, total_bytes):
        with super().progress(total_bytes) as files:
            listener = self

            class Files:
                @contextlib.contextmanager
                def file(self, name, size):
                    if listener.at_upload:
                        listener.change()
                    with files.file(name, size) as sent:
                        yield sent

            yield Files()


def _push_in_process(src: Path, bucket: Path, listener, replace: bool = True):
    from stacks.datasets.push import push_data

    return push_data("fr", src, data_settings=DATA, bucket_uri=f"file://{bucket}", replace=replace, listener=listener)


def test_a_file_changed_after_its_check_is_refused_and_the_bucket_is_left_as_it_was(tmp_path):
    import pytest

    from stacks.errors import TrainstackError

    bucket = tmp_path / "bucket"
    _push_in_process(SAMPLE / "fr" / "train.csv", bucket, Recorder(), replace=False)
    before = (bucket / "fr/data/train.csv").read_bytes()
    src = tmp_path / "train.csv"
    src.write_bytes(before.replace(b"compte", b"account"))
    # the file grows as its check says "kept N of N rows": validated, then changed, before any upload
    changes = ChangesTheFile(src, when=lambda line: line.startswith(f"{src}: kept"))
    with pytest.raises(TrainstackError, match="changed while it was being pushed") as refused:
        _push_in_process(src, bucket, changes)
    assert str(src) in refused.value.message and "push again" in refused.value.hint
    assert (bucket / "fr/data/train.csv").read_bytes() == before
    assert not (bucket / "fr/data/previous").exists()  # nothing rotated
    assert not changes.sent  # no upload began


def test_the_bytes_staged_are_the_bytes_checked_whatever_the_file_becomes_during_the_upload(tmp_path):
    bucket = tmp_path / "bucket"
    src = tmp_path / "train.csv"
    checked = (SAMPLE / "fr" / "train.csv").read_bytes()
    src.write_bytes(checked)
    changes = ChangesTheFile(src, at_upload=True)
    report = _push_in_process(src, bucket, changes)
    assert report.files["fr/data/train.csv"]["action"] == "uploaded"
    assert src.read_bytes() != checked  # it changed as its upload began
    assert (bucket / "fr/data/train.csv").read_bytes() == checked


def test_trainctl_data_push_of_a_file_changed_after_its_check_is_exit_2_and_stages_nothing(project, monkeypatch):
    """The same as `trainctl data push --replace` meets it (the console's listener, the project's bucket): exit 2,
    one error naming the file, nothing replaced. ~1 s."""
    from stacks.cli import data_cmd

    bucket = project / ".trainstack/local/bucket/fr/data"
    assert runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr" / "train.csv")]).exit_code == 0
    before = {p: p.read_bytes() for p in bucket.rglob("*") if p.is_file()}
    src = project / "train.csv"
    src.write_bytes((SAMPLE / "fr" / "train.csv").read_bytes().replace(b"compte", b"account"))

    class SavedWhileChecked(data_cmd.ConsoleListener):
        def say(self, line):
            super().say(line)
            if line.startswith(f"{src}: kept"):  # validated: an editor saves the file now
                with src.open("ab") as fh:
                    fh.write("un texte ajouté pendant le push,livraison\n".encode())

    monkeypatch.setattr(data_cmd, "ConsoleListener", SavedWhileChecked)
    r = runner.invoke(app, ["data", "push", "fr", str(src), "--replace"], env={"COLUMNS": "400"})
    output = " ".join(r.output.split())
    assert r.exit_code == 2 and output.count("error:") == 1 and "changed while it was being pushed" in output, output
    assert {p: p.read_bytes() for p in bucket.rglob("*") if p.is_file()} == before
