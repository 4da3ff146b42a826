"""trainer.jobs without training: the classifier job's stage order, and the harness's account of how a run
ended (exit status, status.json, the log, the scratch folder) for each thing that can stop it."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from trainer.errors import DataError, TrainerExit
from trainer.jobs import classifier as classifier_job
from trainer.jobs import harness
from trainer.runfiles.keys import KEPT_MARK
from trainer.runfiles.status_file import FAILED, INTERRUPTED_STAGE, RUNNING, SUCCEEDED, RunStatus, read_status
from trainer.runtime import distributed as D
from trainer.runtime.preemption import Interrupted
from trainer.runtime.runlog import QuietLog, RunLog
from trainer.storage import LocalBucket, StorageError

# --- the classifier job: ULMFiT's stages in run order --------------------------------------------------------


def stage_recorder(monkeypatch) -> list:
    """Replaces each stage the job calls with one that records its call and returns a marker."""
    calls: list = []

    def recorder(name):
        def stage(*args, **kwargs):
            calls.append((name, args, kwargs))
            return f"<{name} {len(calls)}>"

        return stage

    for name in ("prepare", "finetune", "train_classifier", "evaluate", "upload"):
        monkeypatch.setattr(classifier_job, name, recorder(name))
    monkeypatch.setattr(classifier_job.base_lm, "stage", recorder("base_lm"))
    return calls


def fake_run(*, bidirectional: bool, rank: int = 0):
    rc = SimpleNamespace(a=SimpleNamespace(bidirectional=bidirectional), ctx=D.Context(rank=rank, world=2))
    fit = SimpleNamespace(chosen=[])
    fit.choose_base_lm = fit.chosen.append
    return rc, fit


def test_the_classifier_job_runs_ulmfit_stages_in_order_and_rank_0_evaluates_then_uploads(monkeypatch):
    calls = stage_recorder(monkeypatch)
    rc, fit = fake_run(bidirectional=False)
    classifier_job.run(rc, fit, started=1.0)
    assert [c[0] for c in calls] == ["prepare", "base_lm", "finetune", "train_classifier", "evaluate", "upload"]
    prep, base, encoder, clf, evaluation = (
        f"<{name} {n}>" for n, name in enumerate(("prepare", "base_lm", "finetune", "train_classifier", "evaluate"), 1)
    )
    assert fit.chosen == [base]  # the fitter knows the base LM before the LM is fine-tuned from it
    assert calls[2][1][2:] == (prep, base) and calls[3][1][3] == encoder
    assert calls[4][1][1:] == (prep, base, clf, None)  # no backward classifier
    assert calls[5][1][2:] == (prep, clf, None, evaluation, 1.0)


def test_a_bidirectional_job_trains_the_backward_pair_on_the_forward_vocabulary(monkeypatch):
    calls = stage_recorder(monkeypatch)
    monkeypatch.setattr(
        classifier_job,
        "finetune",
        lambda *a, **k: calls.append(("finetune", a, k)) or SimpleNamespace(vocab=["xxunk", "fwd"], n=len(calls)),
    )
    rc, fit = fake_run(bidirectional=True)
    classifier_job.run(rc, fit, started=1.0)
    names = [c[0] for c in calls]
    assert names == [
        "prepare",
        "base_lm",
        "finetune",
        "train_classifier",
        "finetune",
        "train_classifier",
        "evaluate",
        "upload",
    ]
    forward_kw, backward_kw = calls[2][2], calls[4][2]
    assert forward_kw == {} and backward_kw == {"backwards": True, "vocab": ["xxunk", "fwd"]}
    assert calls[6][1][4] == "<train_classifier 6>"  # evaluate gets the backward classifier


def test_ranks_above_0_train_but_neither_evaluate_nor_upload(monkeypatch):
    calls = stage_recorder(monkeypatch)
    rc, fit = fake_run(bidirectional=False, rank=1)
    classifier_job.run(rc, fit, started=1.0)
    assert [c[0] for c in calls] == ["prepare", "base_lm", "finetune", "train_classifier"]


# --- the harness: how a run ends ------------------------------------------------------------------------------


def args_for(tmp_path, **extra):
    return SimpleNamespace(
        bucket=f"file://{tmp_path / 'bucket'}",
        lang="fr",
        run_id="r1",
        env="local",
        job="classifier",
        work_dir=None,
        precision="fp32",
        **extra,
    )


def started_run(tmp_path, *, rank: int = 0) -> harness.JobRun:
    """A JobRun as the harness holds it once the job started: rank 0 with a RunLog of a RUNNING status."""
    args = args_for(tmp_path)
    bucket = LocalBucket(tmp_path / "bucket")
    run = harness.JobRun(args, D.Context(rank=rank, world=2 if rank else 1), bucket)
    if rank == 0:
        run.log = RunLog(bucket, RunStatus(run_id="r1", lang="fr", env="local"))
        run.log.started()
    return run


def test_a_preempted_run_says_where_its_checkpoint_was_saved_until_it_trains_again_and_a_second_sigterm_is_harmless(
    tmp_path,
):
    from trainer.runtime.checkpoints import Position
    from trainer.runtime.preemption import Preemption

    run = started_run(tmp_path)
    run.preemption = preemption = Preemption(D.Context(rank=0, world=1))
    preemption.in_fit = True
    preemption._on_signal(signal.SIGTERM, None)  # the notice watch's SIGTERM, inside fit(): a flag
    preemption.in_fit = False
    preemption._on_signal(signal.SIGTERM, None)  # the shutdown script's, after fit() stopped: changes nothing
    preemption.saved = Position("classifier", phase=0, epoch=1, batch=5)  # CheckpointCallback's save at the stop
    assert run.stopped_by(Interrupted("SIGTERM")) == TrainerExit.INTERRUPTED
    status = read_status(run.bucket, "fr", "r1")
    said = "preempted: checkpoint saved at epoch 2 batch 5 (classifier phase 1)"
    assert (status.state, status.stage, status.error) == (RUNNING, INTERRUPTED_STAGE, said)
    run.log.flush()
    assert said in (tmp_path / "bucket" / "fr/runs/r1/log.txt").read_text()
    RunLog(run.bucket, status).started()  # the resumed trainer
    assert read_status(run.bucket, "fr", "r1").error is None


@pytest.mark.parametrize(
    "exc, code, state, stage, error",
    [
        (Interrupted("SIGTERM"), TrainerExit.INTERRUPTED, RUNNING, INTERRUPTED_STAGE, None),
        (RuntimeError("Connection reset by peer"), TrainerExit.INTERRUPTED, RUNNING, INTERRUPTED_STAGE, None),
        (
            DataError("no column 'text'", hint="rename it"),
            TrainerExit.BAD_INPUT,
            FAILED,
            "pending",
            "no column 'text' (rename it)",
        ),
        (
            StorageError("write gave up after 300 s of retries (503)", "gs://b/k", transient=True),
            TrainerExit.FAILED,
            FAILED,
            "pending",
            "storage: write gave up after 300 s of retries (503): gs://b/k",
        ),
        (ValueError("a bug"), TrainerExit.FAILED, FAILED, "pending", "ValueError: a bug"),
    ],
)
def test_what_stopped_the_job_decides_its_exit_status_and_status(tmp_path, exc, code, state, stage, error):
    run = started_run(tmp_path)
    assert run.stopped_by(exc) == code
    status = read_status(run.bucket, "fr", "r1")
    assert (status.state, status.stage, status.error) == (state, stage, error)
    # an interrupted run resumes under the same id: its log stays open for the next process to append to
    assert run.interrupted == (code == TrainerExit.INTERRUPTED)


def test_a_run_that_succeeded_is_never_recorded_failed_when_only_its_final_status_write_failed(tmp_path, capsys):
    run = started_run(tmp_path)
    run.log.status.state = SUCCEEDED  # as log.succeeded() sets it before its write gives up
    exc = StorageError("write gave up after 300 s of retries (503)", "gs://b/fr/runs/r1/status.json", transient=True)
    assert run.stopped_by(exc) == TrainerExit.FAILED
    assert read_status(run.bucket, "fr", "r1").state == RUNNING  # the last status written: never FAILED
    assert "finished and uploaded its artifacts, but status.json could not be written" in capsys.readouterr().out


def test_another_rank_records_its_own_error_as_the_runs(tmp_path):
    run = started_run(tmp_path, rank=1)
    assert isinstance(run.log, QuietLog)
    assert run.stopped_by(KeyError("label")) == TrainerExit.FAILED
    assert read_status(run.bucket, "fr", "r1").error == "rank 1: KeyError: 'label'"


@pytest.fixture
def sigterm_restored():
    """run_job installs the trainer's SIGTERM handler: pytest's comes back after the test."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


class FakeFitter:
    board = None

    def __init__(self, rc):
        self.rc = rc


def with_job(monkeypatch, job):
    monkeypatch.setattr(harness, "Fitter", FakeFitter)
    monkeypatch.setitem(harness.SEQUENCES, harness.Job.CLASSIFIER, job)


def test_a_job_that_finishes_is_succeeded_and_its_scratch_folder_goes(tmp_path, monkeypatch, sigterm_restored):
    seen = {}

    def job(rc, fit, started):
        seen["work"], seen["scratch"] = rc.work, rc.scratch
        rc.put(b"{}", "metrics.json")

    with_job(monkeypatch, job)
    assert harness.run_job(args_for(tmp_path)) == TrainerExit.SUCCEEDED
    bucket = LocalBucket(tmp_path / "bucket")
    assert read_status(bucket, "fr", "r1").state == SUCCEEDED
    assert bucket.read_bytes("fr/runs/r1/metrics.json") == b"{}"
    assert not seen["scratch"].exists()
    log = bucket.read_appended("fr/runs/r1/log.txt")[0].decode()
    assert "precision: fp32" in log and "SUCCEEDED in" in log


def test_a_job_whose_artifact_never_lands_fails_and_keeps_its_scratch_folder(
    tmp_path, monkeypatch, sigterm_restored, capsys
):
    seen = {}

    def job(rc, fit, started):
        seen["work"] = rc.work

        def refused(key, data, **kw):
            raise StorageError("permission denied", key)

        rc.bucket.write_bytes = refused  # status.json is written, model.pth is not
        try:
            rc.put(b"weights", "model.pth")
        finally:
            del rc.bucket.write_bytes

    with_job(monkeypatch, job)
    assert harness.run_job(args_for(tmp_path)) == TrainerExit.FAILED
    status = read_status(LocalBucket(tmp_path / "bucket"), "fr", "r1")
    assert status.state == FAILED and status.error.startswith("storage: model.pth not uploaded (permission denied)")
    assert (seen["work"] / "model.pth").read_bytes() == b"weights"
    assert "model.pth: permission denied" in (seen["work"] / KEPT_MARK).read_text()
    assert f"kept {seen['work']}" in capsys.readouterr().out


def test_a_run_that_already_ended_is_refused_untouched(tmp_path, monkeypatch, sigterm_restored):
    ran = []
    with_job(monkeypatch, lambda *a: ran.append(a))
    bucket = LocalBucket(tmp_path / "bucket")
    done = RunStatus(run_id="r1", lang="fr", env="local", state=FAILED, error="earlier")
    bucket.write_bytes("fr/runs/r1/status.json", done.to_json())
    assert harness.run_job(args_for(tmp_path)) == TrainerExit.BAD_INPUT
    assert ran == [] and read_status(bucket, "fr", "r1").error == "earlier"
