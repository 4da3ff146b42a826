"""End to end on `local`: real trainctl, real terraform, real trainer, real files.

After every test: Terraform state holds no resource and no trainer process is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
from pathlib import Path

from tests.support.project import SAMPLE, TINY_SETS
from tests.support.trainctl import assert_nothing_left, only_run, run_dir, start_trainctl, trainctl, wait_for
from trainer.launchers.local import supervisor

LOG_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")  # a line of the run's log.txt


def test_train_end_to_end(trained_fr):
    staged, run_id, r = trained_fr
    assert r.returncode == 0, r.stdout + r.stderr
    # Its tracker was down: one line says what was not mirrored and how to catch up; nothing else changes.
    [warning] = [line for line in r.stderr.splitlines() if "not mirrored to MLflow" in line]
    assert f"fr {run_id}" in warning and "unreachable" in warning
    assert f"catch up: trainctl runs export fr {run_id} --env local" in warning
    folder = run_dir(staged, "fr", run_id)
    for name in (
        "model.pth",
        "metrics.json",
        "valid_predictions.csv",
        "status.json",
        "log.txt",
        "metadata/config.json",
        "metadata/stack.json",
        "metadata/trainer.json",
        "plots/history.png",
        "plots/per_label_f1.png",
    ):
        assert (folder / name).is_file(), name
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "SUCCEEDED" and status["finished_at"] and status["resumed"] == 0
    metrics = json.loads((folder / "metrics.json").read_text())
    assert set(metrics["per_label"]) == {"compte", "facturation", "livraison", "produit"}
    for key in ("micro_f1", "macro_f1", "accuracy", "n_train", "n_valid", "duration_s", "history", "labels"):
        assert key in metrics
    tfidf = metrics["baseline_tfidf"]
    assert set(tfidf["per_label"]) == set(metrics["per_label"]) and tfidf["rows"]["scores"] == "valid"
    assert "TF-IDF baseline on the same rows" in r.stdout
    assert metrics["n_train"] + metrics["n_valid"] == 380
    assert "\r" not in (folder / "log.txt").read_text()
    assert "SUCCEEDED" in r.stdout and "macro-F1" in r.stdout and "train-fr destroyed" in r.stdout
    # Captured (no terminal): every artifact URI whole on one line, no colour codes.
    lines = r.stdout.splitlines()
    for name in ("model.pth", "metrics.json", "valid_predictions.csv", "log.txt", "status.json"):
        uri = f"file://{(folder / name).resolve()}"
        assert any(line.split() == [name, uri] for line in lines), f"{uri} is not whole on one line"
    assert "\x1b[" not in r.stdout and "\x1b[" not in r.stderr
    cost = json.loads((folder / "metadata/cost.json").read_text())
    assert cost["est_cost"] == 0 and cost["billed_vm_s"] == 0  # local runs cost nothing
    assert_nothing_left(staged)
    # The run is listed, and its model answers.
    listing = json.loads(trainctl(staged, "runs", "--json").stdout)
    assert [row["run_id"] for row in listing] == [run_id] and listing[0]["macro_f1"] == metrics["macro_f1"]
    assert (
        listing[0]["tfidf_macro_f1"] == metrics["baseline_tfidf"]["macro_f1"] and listing[0]["scored_rows"] == "valid"
    )
    assert listing[0]["state"] == "SUCCEEDED" and listing[0]["est_cost"] == 0 and listing[0]["configured"]
    p = trainctl(staged, "predict", "fr", "Mon colis n'est jamais arrivé, le suivi est bloqué")
    assert p.returncode == 0 and any(lbl in p.stdout for lbl in metrics["labels"])


def test_second_train_attaches_then_destroy_cancels(staged):
    slow = [*TINY_SETS, "--set", "defaults.trainer.epochs_clf=400"]  # outlasts the follower; destroy cancels it
    # Two at once: one starts the run; the other is turned away naming it (exit 2), or attaches to it once the
    # first is done (exit 0). Never a second run, never Terraform's lock dump.
    first = start_trainctl(staged, "train", "fr", "--detach", *slow)
    second = trainctl(staged, "train", "fr", "--detach", *slow)
    said = [first.communicate(timeout=300)[0], second.stdout + second.stderr]
    run_id = only_run(staged, "fr")
    assert sorted([first.returncode, second.returncode]) in ([0, 0], [0, 2]), said
    for code, out in zip([first.returncode, second.returncode], said):
        assert "Terraform" not in out and "tfdiags" not in out and "Traceback" not in out, out
        assert run_id in out and (code == 0 or "is busy: trainctl (pid" in out), out
    wait_for(lambda: (run_dir(staged, "fr", run_id) / "status.json").exists(), 120, "status.json")
    # A second train while one is active follows it instead of starting another.
    proc = start_trainctl(staged, "train", "fr", *slow)
    seen: list[str] = []

    def read_lines():
        for line in proc.stdout:
            seen.append(line)

    reader = threading.Thread(target=read_lines, daemon=True)
    reader.start()
    wait_for(lambda: any("already active" in line for line in seen), 90, "the attach message")
    # following: the run's log lines (timestamped) come after the attach message
    wait_for(
        lambda: any(
            LOG_LINE.match(line) for line in seen[[i for i, line in enumerate(seen) if "already active" in line][0] :]
        ),
        90,
        "the run's log lines",
    )
    proc.send_signal(signal.SIGINT)  # Ctrl-C while following
    proc.wait(timeout=60)
    reader.join(timeout=10)
    out = "".join(seen)
    assert "already active" in out and run_id in out
    assert proc.returncode == 130 and "keeps running" in out and "trainctl destroy fr" in out
    assert only_run(staged, "fr") == run_id
    pid = supervisor.read_pid(staged / ".trainstack/local/procs" / run_id)
    assert pid and supervisor._alive(pid), "Ctrl-C on the follower must not stop the run"
    d = trainctl(staged, "destroy", "fr")
    assert d.returncode == 0, d.stdout + d.stderr
    status = json.loads((run_dir(staged, "fr", run_id) / "status.json").read_text())
    assert status["state"] == "FAILED" and "cancelled" in status["error"]
    assert_nothing_left(staged)


def test_gc_destroys_stacks_of_ended_runs(staged):
    r = trainctl(staged, "train", "fr", "--detach", *TINY_SETS)
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = only_run(staged, "fr")
    status_file = run_dir(staged, "fr", run_id) / "status.json"
    wait_for(
        lambda: status_file.exists() and json.loads(status_file.read_text())["state"] == "SUCCEEDED",
        240,
        "the detached run to succeed",
    )
    report = run_dir(staged, "fr", run_id) / "report.html"
    assert ">SUCCEEDED</b>" not in report.read_text()  # the trainer wrote it before its final status
    g = trainctl(staged, "gc")
    assert g.returncode == 0 and "destroyed 1 stack" in g.stdout, g.stdout + g.stderr
    assert_nothing_left(staged)
    # gc finished the bookkeeping `train` does for a followed run: the cost and the final report
    assert (run_dir(staged, "fr", run_id) / "metadata" / "cost.json").exists()
    assert '<b class="good">SUCCEEDED</b>' in report.read_text()


def test_failed_run_exits_1_and_tears_down(staged):
    # Holding out nearly every row leaves one training row: the trainer fails after apply.
    r = trainctl(staged, "train", "fr", *TINY_SETS, "--set", "defaults.trainer.valid_pct=0.999")
    assert r.returncode == 1, r.stdout + r.stderr
    run_id = only_run(staged, "fr")
    status = json.loads((run_dir(staged, "fr", run_id) / "status.json").read_text())
    assert status["state"] == "FAILED" and status["error"]
    assert "FAILED" in r.stderr
    assert_nothing_left(staged)


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _status(project: Path, run_id: str) -> dict:
    path = run_dir(project, "fr", run_id) / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _interrupt_during_classifier(project: Path, sets: list[str], pick_victim, sig: int, before=None) -> dict:
    """Start a detached run, send `sig` to the process `pick_victim(run_id, status)` names once the
    classifier has trained an epoch (`before(run_id)` first), and wait for the launcher to resume it to the end."""
    r = trainctl(project, "train", "fr", "--detach", *sets)
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = only_run(project, "fr")
    status = wait_for(
        lambda: (s := _status(project, run_id)).get("stage") == "classifier" and s["epoch"] >= 1 and s,
        240,
        "the classifier's first epoch",
    )
    # The trainers stopped while `before` runs and the signal is sent: the classifier cannot finish meanwhile,
    # however slow this machine is.
    launcher = supervisor.read_pid(project / ".trainstack/local/procs" / run_id, supervisor.TRAINER_PID_FILE)
    trainers = {status["pid"], *_children(launcher)}
    for pid in trainers:
        os.kill(pid, signal.SIGSTOP)
    try:
        if before is not None:
            before(run_id)
        os.kill(pick_victim(run_id, status), sig)
    finally:
        for pid in trainers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    final = wait_for(
        lambda: (s := _status(project, run_id)).get("state") in ("SUCCEEDED", "FAILED") and s, 300, "the run to end"
    )
    assert final["state"] == "SUCCEEDED", final
    assert final["resumed"] >= 1
    folder = run_dir(project, "fr", run_id)
    for name in ("model.pth", "metrics.json", "valid_predictions.csv", "plots/history.png"):
        assert (folder / name).is_file(), name
    history = json.loads((folder / "metrics.json").read_text())["history"]
    epochs = [h["epoch"] for h in history if h["stage"] == "classifier"]
    assert epochs == list(range(1, len(epochs) + 1)), "an epoch was lost or repeated across the resume"
    g = trainctl(project, "gc")
    assert g.returncode == 0, g.stdout + g.stderr
    listing = json.loads(trainctl(project, "runs", "--json").stdout)
    assert listing[-1]["run_id"] == run_id and listing[-1]["resumed"] == final["resumed"]
    assert_nothing_left(project)
    return final


def test_sigkill_to_the_trainer_resumes_and_succeeds(staged):
    # A crash or OOM kill: no checkpoint at the kill; the launcher restarts the trainer, which
    # resumes from the newest complete checkpoint, as a recreated Spot VM would. Its exit status (137) is named
    # in restart_on_exit_codes: a restart after an error, on its own budget, recorded like a placement.
    final = _interrupt_during_classifier(
        staged,
        [
            *TINY_SETS,
            "--set",
            "defaults.trainer.epochs_clf=10",
            "--set",
            "defaults.restart_on_exit_codes=[75,137]",
            "--set",
            "defaults.max_restarts_on_errors=1",
        ],
        lambda run_id, status: status["pid"],
        signal.SIGKILL,
    )
    run_id, folder = final["run_id"], run_dir(staged, "fr", final["run_id"])
    assert "restart 1 of 1 after exit code 137 (restart_on_exit_codes)" in (folder / "log.txt").read_text()
    [record] = json.loads((folder / "metadata/restarts.json").read_text())["restarts"]
    assert record["exit_code"] == 137 and record["launcher"] == "local"
    assert "<h2>Restarts</h2>" in (folder / "report.html").read_text()
    [row] = [r for r in json.loads(trainctl(staged, "runs", "--json").stdout) if r["run_id"] == run_id]
    assert row["restarts"] == 1 and row["resumed"] == final["resumed"]


def test_sigterm_to_one_rank_of_two_after_a_data_push_resumes_on_the_runs_own_data(staged, tmp_path):
    def rank1(run_id: str, status: dict) -> int:
        launcher = supervisor.read_pid(staged / ".trainstack/local/procs" / run_id, supervisor.TRAINER_PID_FILE)
        ranks = [pid for pid in _children(launcher) if pid != status["pid"]]
        assert len(ranks) == 1, ranks
        return ranks[0]

    # Other data pushed while the run trains: fewer rows (280 of 380), so a run that read it would say so.
    new = tmp_path / "new"
    new.mkdir()
    lines = (SAMPLE / "fr" / "train.csv").read_text().splitlines(keepends=True)
    (new / "train.csv").write_text("".join(lines[:281]))
    pushes = []

    def push(run_id: str) -> None:
        pushes.append(trainctl(staged, "data", "push", "fr", str(new), "--replace", "--json"))
        assert pushes[0].returncode == 0, pushes[0].stdout + pushes[0].stderr

    final = _interrupt_during_classifier(
        staged,
        [*TINY_SETS, "--set", "defaults.trainer.epochs_clf=10", "--set", "languages.fr.local.processes=2"],
        rank1,
        signal.SIGTERM,
        before=push,
    )
    run_id = final["run_id"]
    folder = run_dir(staged, "fr", run_id)
    log = (folder / "log.txt").read_text()
    assert "data parallel: 2 processes" in log and "classifier: resumed at classifier" in log
    # The push said what it means to the run; the run resumed, and was scored, on the data it started with.
    assert f"run {run_id} (RUNNING) keeps training" in pushes[0].stderr, pushes[0].stderr
    active = json.loads(pushes[0].stdout)["active_runs"]
    assert active == [{"run_id": run_id, "state": "RUNNING", "trains_on": "own copy"}]
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["n_train"] + metrics["n_valid"] == 380
    assert "this run's own copy" in log
    assert (folder / "data/train.csv").read_bytes() == (SAMPLE / "fr/train.csv").read_bytes()
    assert (staged / ".trainstack/local/bucket/fr/data/train.csv").read_bytes() == (new / "train.csv").read_bytes()


# A model big enough to learn something on the sample in seconds (TINY predicts every label).
SMALL = [
    *TINY_SETS,
    "--set",
    "defaults.trainer.epochs_base_lm=2",
    "--set",
    "defaults.trainer.epochs_clf=8",
    "--set",
    "defaults.trainer.emb_sz=64",
    "--set",
    "defaults.trainer.n_hid=128",
]
# Two ranks at bs 16 take the steps one process takes at bs 32 (bs is per process). Their
# macro-F1 differs by data order and dropout masks only; measured 0.647 vs 0.592 (2 cores).
DATA_PARALLEL_TOLERANCE = 0.15


def test_two_processes_train_data_parallel_like_one(staged):
    one = trainctl(staged, "train", "fr", *SMALL, "--set", "defaults.trainer.bs=32")
    assert one.returncode == 0, one.stdout + one.stderr
    two = trainctl(
        staged, "train", "fr", *SMALL, "--set", "defaults.trainer.bs=16", "--set", "languages.fr.local.processes=2"
    )
    assert two.returncode == 0, two.stdout + two.stderr
    runs = sorted(p.name for p in (staged / ".trainstack/local/bucket/fr/runs").iterdir())
    metrics = [json.loads((run_dir(staged, "fr", r) / "metrics.json").read_text()) for r in runs]
    assert abs(metrics[0]["macro_f1"] - metrics[1]["macro_f1"]) <= DATA_PARALLEL_TOLERANCE, metrics
    folder = run_dir(staged, "fr", runs[1])
    log = (folder / "log.txt").read_text()
    assert "data parallel: 2 processes" in log and log.count("SUCCEEDED in") == 1  # rank 0 alone writes
    assert json.loads((folder / "metadata/trainer.json").read_text())["world_size"] == 2
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == sorted(
        {*(p.name for p in (folder / "checkpoints").glob("*.ckpt.pt")), "LATEST.ckpt.json"}
    )
    assert_nothing_left(staged)
