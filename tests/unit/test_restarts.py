"""Bounded restarts after a failure not the code's (trainer.launchers.restarts), as the local supervisor applies
them to a real file:// run folder, and the config check on the exit codes a user names."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from trainer.launchers.interruptions import interruption
from trainer.launchers.local.supervisor import _restart_on_error, _run_args
from trainer.launchers.restarts import RestartPolicy
from trainer.runfiles.restarts import read_restarts
from trainer.runfiles.status_file import FAILED, RUNNING, RunStatus
from trainer.storage import open_bucket

RUN = "20261129-090000-cafe"


def run_folder(tmp_path):
    bucket = open_bucket(f"file://{tmp_path}")
    args = _run_args(["--lang", "fr", "--bucket", f"file://{tmp_path}", "--env", "local", "--run-id", RUN])
    return bucket, args


def test_a_named_exit_code_is_restarted_within_its_budget_then_ends_the_run_naming_the_limit(tmp_path):
    bucket, args = run_folder(tmp_path)
    policy, running = RestartPolicy(1, (137,)), RunStatus(run_id=RUN, lang="fr", env="local", state=RUNNING)
    # a Spot VM of the market killed by its preemption (no notice: SIGKILL) is the market's doing, not an error
    preempted = SimpleNamespace(zone="local-a", preempted=True)
    assert _restart_on_error(bucket, args, policy, -9, running, spot=preempted) is None
    assert read_restarts(bucket, "fr", RUN) == []
    vm = SimpleNamespace(zone="local-a", preempted=False)
    assert _restart_on_error(bucket, args, policy, -9, running, spot=vm) is True  # SIGKILL reads 137
    [record] = read_restarts(bucket, "fr", RUN)
    assert record["restart"] == 1 and record["exit_code"] == 137 and record["launcher"] == "local"
    assert record["zone"] == "local-a" and record["cause"] == "exit code 137 (restart_on_exit_codes)"
    log = bucket.read_appended(f"fr/runs/{RUN}/log.txt")[0].decode()
    assert "restart 1 of 1 after exit code 137 (restart_on_exit_codes)" in log
    # The count is the run's, in its folder: another launcher process (a resumed run) reads it.
    again = _restart_on_error(bucket, args, policy, 137, running, spot=None)
    assert again == "exit code 137 (restart_on_exit_codes) after 1 restart(s): max_restarts_on_errors=1 reached"
    assert len(read_restarts(bucket, "fr", RUN)) == 1


def test_the_codes_fault_or_an_unnamed_code_is_left_to_the_interruption_rule(tmp_path):
    bucket, args = run_folder(tmp_path)
    policy = RestartPolicy(3, (1, 2, 75))
    failed = RunStatus(run_id=RUN, lang="fr", env="local", state=FAILED, error="ValueError: boom")
    running = RunStatus(run_id=RUN, lang="fr", env="local", state=RUNNING)
    assert _restart_on_error(bucket, args, policy, 1, failed, spot=None) is None  # a Python error: FAILED written
    assert _restart_on_error(bucket, args, policy, 2, running, spot=None) is None  # bad input, named or not
    assert _restart_on_error(bucket, args, policy, 76, running, spot=None) is None  # not named
    assert read_restarts(bucket, "fr", RUN) == []


def test_restarts_after_errors_are_resumes_but_not_interruptions():
    status = RunStatus(run_id=RUN, lang="fr", env="local", state=RUNNING, resumed=3)
    assert interruption(status) == 4 and interruption(status, restarted_on_errors=2) == 2


@pytest.mark.parametrize(
    "codes, said", [("[0]", "0 (success)"), ("[75,143]", "143 (an interruption"), ("[300]", "300")]
)
def test_exit_codes_that_say_something_else_are_refused(project, codes, said):
    r = CliRunner().invoke(
        app, ["config", "show", "--set", f"defaults.restart_on_exit_codes={codes}"], env={"COLUMNS": "400"}
    )
    output = " ".join(r.output.split())
    assert r.exit_code == 2 and f"restart_on_exit_codes: {said}" in output, output


def test_a_failure_every_node_meets_is_one_restart_of_the_run_and_the_restarted_trainers_failure_another(tmp_path):
    """Two nodes end with the same named exit code: each agent asks to restart, the run counts one restart (the
    second node restarts under the first one's record). The restarted trainers fail again: a new failure, counted,
    and past max_restarts_on_errors the run ends (never a loop)."""
    from trainer.launchers.vm.restarts import ErrorRestarts
    from trainer.launchers.vm.spec import VmSpec

    spec = VmSpec(
        run_id=RUN,
        lang="fr",
        env="dev",
        bucket=f"file://{tmp_path}",
        args=["--lang", "fr"],
        nodes=2,
        gpus_per_node=1,
        max_run_hours=4,
        project="p1",
        zone="europe-west4-a",
        mig="dev-train-fr",
        base_name="dev-train-fr",
        max_restarts_on_errors=2,
        restart_on_exit_codes=(75,),
    )
    bucket = open_bucket(f"file://{tmp_path}")
    nodes = [ErrorRestarts(spec, rank, lambda: None, after=0) for rank in (0, 1)]
    cause = "exit code 75 (restart_on_exit_codes)"
    assert [node.restart(75, cause) for node in nodes] == [True, True]
    assert [r["node"] for r in read_restarts(bucket, "fr", RUN)] == [0]
    log = bucket.read_appended(f"fr/runs/{RUN}/log.txt")[0].decode()
    assert log.count("restart 1 of 2 after exit code 75") == 1
    assert [node.restart(75, cause) for node in reversed(nodes)] == [True, True]  # node 1 first this time
    assert [r["node"] for r in read_restarts(bucket, "fr", RUN)] == [0, 1]
    ended = [node.restart(75, cause) for node in nodes]
    assert all(isinstance(e, str) and "max_restarts_on_errors=2 reached" in e for e in ended), ended
    assert len(read_restarts(bucket, "fr", RUN)) == 2
