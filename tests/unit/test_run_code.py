"""A run keeps the trainer code it trained with (code/trainer.zip), and the model a tracker logs carries that code,
not the exporting checkout's."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import pytest

import trainer
from tests.support.runs import tracked_run
from trainer.runfiles.code_archive import archive_code, extract_code
from trainer.runfiles.keys import CODE_ARCHIVE, run_key

TRAINER = Path(trainer.__file__).parent
RUN = "20261127-100000-abcd"


def test_the_archive_is_the_package_and_the_same_code_is_the_same_bytes(tmp_path):
    data = archive_code(TRAINER)
    assert data == archive_code(TRAINER)  # no times or order of the file system in it
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "trainer/serving/served_model.py" in names and names == sorted(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    package = extract_code(data, tmp_path)
    assert package == tmp_path / "trainer"
    assert (package / "stages" / "upload.py").read_bytes() == (TRAINER / "stages" / "upload.py").read_bytes()


def test_an_entry_outside_the_package_is_refused(tmp_path):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("trainer/../../evil.py", "x = 1\n")
    with pytest.raises(ValueError, match="not inside trainer/"):
        extract_code(out.getvalue(), tmp_path / "dest")
    assert not (tmp_path / "evil.py").exists()


def test_the_logged_model_carries_the_runs_code_not_this_checkouts(tmp_path):
    from stacks.tracking.model import pyfunc_model
    from trainer.serving.model_code import code_package
    from trainer.storage import open_bucket

    tracked_run(tmp_path / "bucket", "fr", RUN)
    bucket = open_bucket(f"file://{tmp_path / 'bucket'}")
    with pyfunc_model(bucket, "fr", RUN) as model:  # a run that kept no code: this checkout's, said so
        assert model["metadata"]["trainstack.code_package"] == code_package(TRAINER)
        assert model["metadata"]["trainstack.code_origin"].startswith("the exporting checkout")

    trained_by = shutil.copytree(TRAINER, tmp_path / "other" / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    (trained_by / "serving" / "trained_here.py").write_text("MARK = 'the run trained with this'\n")
    bucket.write_bytes(run_key("fr", RUN, CODE_ARCHIVE), archive_code(trained_by))
    with pyfunc_model(bucket, "fr", RUN) as model:
        (code,) = model["code_paths"]  # one zip, not the package's hundred-odd files
        assert Path(code).name == f"{code_package(trained_by)}.zip" != f"{code_package(TRAINER)}.zip"
        assert f"{code_package(trained_by)}/serving/trained_here.py" in zipfile.ZipFile(code).namelist()
        assert model["metadata"]["trainstack.code_origin"].startswith(f"the run's own ({CODE_ARCHIVE}")
