"""Where a run's files live in the bucket: `<lang>/runs/<run-id>/<name>`, and the names both sides share."""

from __future__ import annotations

ARTIFACTS = ("model.pth", "metrics.json", "valid_predictions.csv")
TFIDF_FILES = ("tfidf.json", "tfidf.npz")  # the TF-IDF part of a kept blend (trainer.classification.blend)
BWD_MODEL = "model_bwd.pth"  # the backward classifier (trainer.bidirectional), loadable like model.pth
TRAINCTL_META = "metadata/trainctl.json"  # written by trainctl at apply: the stack, placement, estimate
PLACEMENTS_META = "metadata/placements.json"  # written by trainctl as the run moves: placements, preemptions, waits
RESTARTS_META = "metadata/restarts.json"  # written by the launchers: each restart after a failure not the code's
RUN_DATA = "data/"  # the run's own copy of <lang>/data/, taken at its first start (trainer.runtime.run_data)
DATA_RECORD = "metadata/data.json"  # what that copy holds: each file's size and checksum, written last
CHECKPOINT_POINTER = "checkpoints/LATEST.ckpt.json"  # names the newest checkpoint (trainer.runtime.checkpoints)
SETTINGS_CHANGES = "metadata/changes.json"  # settings changed by a resume (stacks.runs.resume_check); config.json stays
CODE_ARCHIVE = "code/trainer.zip"  # the trainer code the run trained with (trainer.runfiles.code_archive)
KEPT_MARK = "UPLOAD_FAILED"  # in a work folder: an artifact did not reach the bucket, so the folder is kept


def run_prefix(lang: str, run_id: str) -> str:
    return f"{lang}/runs/{run_id}/"


def run_key(lang: str, run_id: str, name: str) -> str:
    return run_prefix(lang, run_id) + name
