"""Two trainctl on one stack: the second is turned away with one line naming the run the first starts (its lock)
or the command that holds Terraform's state lock, exit 2, and the first one's run is left as it was."""

from __future__ import annotations

import fcntl
import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from stacks.errors import StackBusyError
from stacks.project import Project
from stacks.runs.stack_lock import stack_lock
from tests.support.project import SAMPLE
from tests.support.runs import write
from tests.support.trainctl import trainctl
from trainer.runfiles.status_file import RunStatus

WINNER = "20261128-101500-a1b2"


def bucket_files(project: Path) -> dict[str, bytes]:
    root = project / ".trainstack" / "local" / "bucket"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def staged_with_a_starting_run(project: Path) -> None:
    assert CliRunner().invoke(app, ["data", "push", "fr", str(SAMPLE / "fr")]).exit_code == 0
    status = RunStatus(run_id=WINNER, lang="fr", env="local", state="STARTING", stage="prepare")
    write(project / ".trainstack/local/bucket", f"fr/runs/{WINNER}/status.json", status.to_json())


def assert_one_line_error(proc, *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr
    for raw in ("Traceback", "tfdiags", "Error acquiring", "Lock Info", "╷"):
        assert raw not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_a_second_trainctl_names_the_run_the_first_is_starting(project):
    """The first trainctl holds train-fr's lock while it starts run WINNER (as between its synth and its apply):
    train and destroy from a second one refuse before they synthesize anything, gc keeps the stack. ~6 s."""
    staged_with_a_starting_run(project)
    before = bucket_files(project)
    with stack_lock(Project(project), "local", "train-fr", lang="fr", doing=f"starting run {WINNER}", run_id=WINNER):
        train = trainctl(project, "train", "fr", "--env", "local", "--detach")
        assert_one_line_error(train, WINNER, "is busy", "trainctl logs fr --env local --follow")
        assert_one_line_error(trainctl(project, "destroy", "fr", "--env", "local"), WINNER, "is busy")
        gc = trainctl(project, "gc", "--env", "local")  # keeps a stack whose run is starting, collects the rest
        assert gc.returncode == 0 and f"is starting run {WINNER}; kept" in gc.stdout, gc.stdout + gc.stderr
    assert not (project / ".trainstack/local/cdktf.out/stacks/train-fr").exists(), "the second one synthesized"
    assert bucket_files(project) == before


def test_terraform_state_locked_by_another_command_is_one_line(project):
    """Terraform's own state lock held (a `trainctl plan`, a terraform by hand): trainctl says who holds it, never
    Terraform's lock dump, and with no lock info, that much. ~6 s (two destroy: a synth and init each; a train
    meets the lock in the same Terraform runner after its data check, 15 s of CPU)."""
    staged_with_a_starting_run(project)
    state = Project(project).state_file("local", "train-fr")
    state.parent.mkdir(parents=True, exist_ok=True)
    lock_id = "6a0c0e0e-1b2c-4d5e-8f90-0123456789ab"
    # Terraform's local lock: a POSIX write lock on the state file, its holder in .<name>.lock.info
    info = state.parent / f".{state.name}.lock.info"
    info.write_text(
        json.dumps(
            {
                "ID": lock_id,
                "Operation": "OperationTypePlan",
                "Info": "",
                "Who": "ana@laptop",
                "Version": "1.5.7",
                "Created": "2026-11-28T10:15:00.000000Z",
                "Path": str(state),
            }
        )
    )
    before = bucket_files(project)
    with open(state, "a+") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        destroy = trainctl(project, "destroy", "fr", "--env", "local")
        assert_one_line_error(destroy, "locked by another command (plan, by ana@laptop", f"force-unlock {lock_id}")
        info.unlink()  # a holder that wrote no lock info
        destroy = trainctl(project, "destroy", "fr", "--env", "local")
        assert_one_line_error(destroy, "Terraform's state of train-fr is locked by another command", "rerun once")
    assert bucket_files(project) == before


def test_a_step_of_a_run_under_way_waits_for_the_command_holding_the_stack(project):
    """A run's move meets the stack's lock held by another trainctl (gc collecting it): it waits, told once who holds
    it, and goes on once that one lets go; with no wait, or past it, it is turned away. <2 s."""
    path = Project(project).env_dir("local") / "locks" / "train-fr.lock"
    path.parent.mkdir(parents=True)
    with open(path, "w") as held:
        held.write(json.dumps({"pid": 4242, "doing": "collecting train-fr", "run": None, "lang": "fr"}))
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(StackBusyError):
            with stack_lock(Project(project), "local", "train-fr", lang="fr", doing="moving run X", wait_s=0.6):
                pass
        told: list[str] = []

        def let_go_later(why: str) -> None:
            told.append(why)
            threading.Timer(0.5, lambda: fcntl.flock(held, fcntl.LOCK_UN)).start()

        with stack_lock(
            Project(project), "local", "train-fr", lang="fr", doing="moving run X", wait_s=30, on_wait=let_go_later
        ) as hold:
            assert hold.lang == "fr"
    assert told == ["train-fr in env local is busy: trainctl (pid 4242) is collecting train-fr"], told
