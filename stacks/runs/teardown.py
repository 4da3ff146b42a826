"""A language's stack torn down outside a `train`: `trainctl destroy` (whatever its run is doing) and `trainctl gc`
(only where the run has ended, by stack_ops.stack_run's rule). The command prints what they return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from stacks.errors import StackBusyError
from stacks.runs import stack_ops
from stacks.runs.language_run import resolve, resume_command
from stacks.runs.runflow import record_cost
from stacks.runs.watch import Reporter

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig
    from stacks.project import Project
    from trainer.runfiles.status_file import RunStatus


@dataclass
class Destroyed:
    """`destroy`: the stack, the run it held (its final status), or the runs it stopped that waited for a
    placement (no stack held them)."""

    stack: str
    run_id: str | None = None
    status: "RunStatus | None" = None
    stopped_waiting: list[str] = field(default_factory=list)


def destroy_language(project: "Project", config: "EnvConfig", lang: str, rep: Reporter) -> Destroyed:
    """Destroy the language's stack; its run, or a run between placements (whoever follows it applies nothing
    more), without a final status is stopped FAILED with how to resume it; the run's cost and report written."""
    from trainer.runfiles.status_file import mark_failed

    run = resolve(project, config, lang)
    with stack_ops.lock_of(run, f"destroying {run.stack}"):  # the run it finds is the one it destroys
        stack_ops.open_stack(run)
        run.run_id = stack_ops.active_run(run)
        stack_ops.teardown(run, rep)
        between = [] if run.run_id else stack_ops.live_runs_between_placements(run)
    for run_id in between:
        why = "stopped by trainctl destroy while it waited for a placement"
        mark_failed(run.bucket, lang, run_id, run.env, f"{why}; resume it: {resume_command(lang, run.env, run_id)}")
    if not run.run_id:
        return Destroyed(run.stack, stopped_waiting=between)
    # No VM was running it (waiting for capacity): say how it ended; a run that ended keeps its own word.
    why = "stopped: the stack was destroyed before the run ended"
    status = mark_failed(
        run.bucket, lang, run.run_id, run.env, f"{why}; resume it: {resume_command(lang, run.env, run.run_id)}"
    )
    record_cost(run, rep)  # a detached run's cost and final report.html
    return Destroyed(run.stack, run.run_id, status)


@dataclass
class Collected:
    """`gc`, for one language: the run its stack held (None: nothing applied, left alone), and why the stack was
    kept: the run's live state, or the command that holds the stack (`busy`: StackBusyError's message)."""

    stack: str
    run_id: str | None = None
    state: str | None = None
    busy: str | None = None

    @property
    def destroyed(self) -> bool:
        return self.run_id is not None and self.state is None and self.busy is None


def collect_ended(project: "Project", config: "EnvConfig", rep: Reporter) -> Iterator[Collected]:
    """Every language's stack whose run has ended (or never started) destroyed, its cost and report written;
    one Collected per language, as it goes."""
    from trainer.storage import open_bucket

    bucket = open_bucket(config.bucket)
    for lang in config.languages:
        run = resolve(project, config, lang, bucket=bucket)
        try:
            with stack_ops.lock_of(run, f"collecting {run.stack}"):  # no run is applied between look and teardown
                stack_ops.open_stack(run)
                run.run_id, state = stack_ops.stack_run(run)  # the rule `train` tears an ended run's stack down by
                if run.run_id and state is None:
                    stack_ops.teardown(run, rep)
        except StackBusyError as busy:  # another command is starting or ending a run there: it is not gc's
            yield Collected(run.stack, busy=busy.message)
            continue
        if run.run_id and state is None:
            record_cost(run, rep)  # a detached run's cost and final report.html
        yield Collected(run.stack, run.run_id, state)
