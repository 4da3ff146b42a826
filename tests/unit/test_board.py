"""TensorBoard's view of a run (trainer/runtime/board.py, fed by BoardCallback), read back with TensorBoard's
own loader: MLflow's mirror's names and steps (stacks/tracking/record.py), the learning rate, the HParams
session. No training: tests/support/runs.py's finished run goes through the callback epoch by epoch."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from stacks.tracking.record import read_mirror
from tests.support.runs import tracked_run, write
from trainer.runfiles.curves import run_settings
from trainer.runtime.board import Board
from trainer.runtime.callbacks import BoardCallback
from trainer.storage import open_bucket

pytest.importorskip("tensorboard", reason="the trainer's extra brings tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData  # noqa: E402

RUN = "20261127-100000-b0a4"
ARGS = {
    "epochs_clf": 2,
    "lr": 0.01,
    "bidirectional": False,
    "label_cols": ["a"],
    "lang_code": None,
    "bucket": "x",
    "run_id": RUN,
    "work_dir": "/tmp/w",
}
LOG = SimpleNamespace(line=lambda text: None)


def board_of(root, work, *, finished: bool = True) -> EventAccumulator:
    """The run's history through BoardCallback as its fit appends it (the head's rate 0.001, 0.002, ... an
    epoch), the board closed as the run's end closes it; what it uploaded, as TensorBoard loads it."""
    bucket = open_bucket(f"file://{root}")
    history = json.loads(bucket.read_bytes(f"fr/runs/{RUN}/metrics.json"))["history"]
    if not finished:
        bucket.delete(f"fr/runs/{RUN}/metrics.json")
    board = Board(bucket, "fr", RUN, work, LOG, settings=run_settings(ARGS), every_s=0)
    fed: list[dict] = []
    callback = BoardCallback(board, fed)
    groups = [{"lr": 0.0}, {"lr": 0.0}]  # ULMFiT's layer groups: the last one is the head
    callback.learn = SimpleNamespace(cbs=[], epoch=0, opt=SimpleNamespace(hypers=groups))
    for place, record in enumerate(history, 1):
        fed.append(record)
        groups[-1]["lr"] = place / 1000
        callback.after_epoch()
    board.close()
    return EventAccumulator(str(root / "fr/runs" / RUN / "tensorboard")).Reload()


def points(board: EventAccumulator) -> dict[tuple[str, int], float]:
    return {(tag, event.step): event.value for tag in board.Tags()["scalars"] for event in board.Scalars(tag)}


@pytest.fixture
def run(tmp_path):
    tracked_run(tmp_path, "fr", RUN)
    trainer_meta = json.loads((tmp_path / "fr/runs" / RUN / "metadata/trainer.json").read_text())
    write(tmp_path, f"fr/runs/{RUN}/metadata/trainer.json", {**trainer_meta, "args": ARGS})
    return tmp_path


def test_every_figure_has_mlflows_name_and_step_in_tensorboard(run, tmp_path):
    """Per-epoch figures `<stage>/<figure>` at the global epoch, finals at the last epoch's step: the same
    points as the mirror's, but for what trainctl adds once the run has ended (Spot, cost: test_records)."""
    board = board_of(run, tmp_path / "work")
    mirror = read_mirror(open_bucket(f"file://{run}"), "fr", RUN, env="local")
    mlflow = {(m.key, m.step): m.value for m in mirror.metrics if not m.key.startswith(("spot/", "cost/"))}
    seen = points(board)
    assert {k: v for k, v in seen.items() if not k[0].endswith("/lr")} == pytest.approx(mlflow)
    assert ("classifier/macro_f1_at_0.5", 2) in seen and ("lm_finetune/valid_loss", 1) in seen
    assert ("f1/b c", 3) in seen and ("macro_f1", 3) in seen
    # one TensorBoard section per stage; the rate is the head's, the epoch's last
    assert {k[0] for k in seen if k[0].endswith("/lr")} == {"lm_finetune/lr", "classifier/lr"}
    assert {k: v for k, v in seen.items() if k[0].endswith("/lr")} == pytest.approx(
        {("lm_finetune/lr", 1): 0.001, ("classifier/lr", 2): 0.002, ("classifier/lr", 3): 0.003}
    )


def test_the_run_is_one_hparams_session_with_mlflows_params_and_final_figures(run, tmp_path):
    board = board_of(run, tmp_path / "work")
    content = {tag: HParamsPluginData.FromString(raw) for tag, raw in board.PluginTagToContent("hparams").items()}
    start = content["_hparams_/session_start_info"].session_start_info
    hparams = {k: getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
    # MLflow's params, name for name (what the run recorded of itself too: its tokenizer, not `auto`, the
    # data's hash, rows, device); numbers stay numbers (the tab's axes), the rest as MLflow's params show
    # them (None too); the run's whereabouts (bucket, run id, work dir) left out
    params = read_mirror(open_bucket(f"file://{run}"), "fr", RUN, env="local").params
    assert {k: v if isinstance(v, str) else f"{v:g}" for k, v in hparams.items()} == params
    assert hparams["epochs_clf"] == 2 and hparams["n_train"] == 30 and hparams["label_cols"] == "['a']"
    assert hparams["tokenizer"] == "fastai-spacy-blank-v1" and hparams["data_hash"] == "d1e2f3a4b5c6d7e8"
    assert hparams["lang_code"] == "None" and {"bucket", "run_id", "work_dir"}.isdisjoint(hparams)
    metrics = [m.name.tag for m in content["_hparams_/experiment"].experiment.metric_infos]
    assert {"macro_f1", "micro_f1", "accuracy", "f1/a", "f1/b c", "duration_s"} <= set(metrics)
    final = {tag: points(board)[(tag, 3)] for tag in metrics}  # the session's figures, at the last epoch
    assert final["macro_f1"] == pytest.approx(0.8) and final["f1/b c"] == pytest.approx(0.9)


def test_a_run_that_did_not_finish_has_its_curves_and_no_hparams_session(run, tmp_path):
    board = board_of(run, tmp_path / "work", finished=False)
    assert ("classifier/valid_loss", 3) in points(board) and ("macro_f1", 3) not in points(board)
    with pytest.raises(KeyError):
        board.PluginTagToContent("hparams")


def test_what_trainctl_adds_once_the_run_has_ended_is_in_tensorboard_as_mlflow_has_it(run, tmp_path, project):
    """The cost and the Spot time, known after the trainer has gone: trainctl's own event file beside the
    trainer's (TensorBoard reads the folder's files in name order), at the step the mirror logs them."""
    from stacks.project import Project
    from stacks.runs.records import record_cost

    bucket = open_bucket(f"file://{run}")
    board_of(run, tmp_path / "work")
    record_cost(bucket, Project(project).load("local"), "fr", RUN)
    record_cost(bucket, Project(project).load("local"), "fr", RUN)  # recorded again: replaced, never twice
    board = EventAccumulator(str(run / "fr/runs" / RUN / "tensorboard")).Reload()
    mirror = read_mirror(bucket, "fr", RUN, env="local")
    after_run = {(m.key, m.step): m.value for m in mirror.metrics if m.key.startswith(("cost/", "spot/"))}
    assert ("spot/preemptions", 3) in after_run and ("cost/est_usd", 3) in after_run
    seen = points(board)
    assert {k: v for k, v in seen.items() if not k[0].endswith("/lr")} == pytest.approx(
        {(m.key, m.step): m.value for m in mirror.metrics}
    )
    assert all(len(board.Scalars(tag)) == 1 for tag, _ in after_run)
