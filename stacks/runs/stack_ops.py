"""A language's stack: synthesize and init it, lock it, apply it for a new run (or find the run it holds),
record the run's metadata, tear it down. `train`, `destroy` and `gc` share these steps and `stack_run`,
the one rule for whether the run a stack holds has ended."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

from stacks.config import EnvConfig
from stacks.errors import ExitStatus, TrainstackError
from stacks.project import Project
from stacks.runs.language_run import LanguageRun, resume_command
from stacks.runs.stack_lock import stack_lock
from stacks.runs.watch import Reporter, live_state
from stacks.targets import target_of
from stacks.terraform import terraform_version
from trainer.runfiles.keys import TRAINCTL_META, run_key
from trainer.runfiles.run_ids import new_run_id
from trainer.runfiles.status_file import INTERRUPTED_STAGE, PENDING, SUCCEEDED


def synth_and_init(project: Project, config: EnvConfig, name: str, echo=None, placements=None):
    """Synthesize stack `name` and `terraform init` it -> its Terraform runner."""
    from stacks.terraform import terraform_binary

    terraform_binary()  # fail fast (exit 3) before the slower synth
    from stacks.app import synth

    outdir = project.work_outdir(config.env)
    # under the stack's lock: another trainctl's synth or init would rewrite the folder of an apply under way
    with stack_lock(project, config.env, name, doing=f"synthesizing {name}"):
        synth(config, project, outdir, placements=placements, only={name})
        tf = target_of(config).stack_runner(config, outdir / "stacks" / name, name, echo)
        tf.init()
    return tf


def open_stack(
    run: LanguageRun, echo=None, *, preflight: bool = False, reporter: Reporter | None = None, decided=None
) -> LanguageRun:
    """Synthesize (after the target's preflight when asked: gcp quota, image, boot image) and
    `terraform init` a language's stack -> the run, with its Terraform runner and placement."""
    from stacks.terraform import terraform_binary

    terraform_binary()  # before the target's preflight and its cloud calls (plan, destroy, gc; train looked earlier)
    config, lang = run.config, run.lang
    run.placement = None
    if preflight:
        from stacks.runs.zone_ranking import ranked_config

        # the zones in ranked order (`decided`: placed beside other languages already, by the env's order)
        ranked = config if decided is not None else ranked_config(run.target, config, lang, run.bucket, reporter)
        run.placement = run.target.preflight(ranked, lang, reporter, decided=decided)
    run.tf = synth_and_init(run.project, config, run.stack, echo, {lang: run.placement} if run.placement else None)
    return run


def open_foundation(project: Project, config: EnvConfig, echo=None):
    """Synthesize and `terraform init` the foundation stack of a gcp env -> its Terraform runner."""
    from stacks.naming import FOUNDATION

    return synth_and_init(project, config, FOUNDATION, echo)


# A step of a run this command already follows (a move's teardown and apply, the teardown at its end) waits this long
# for another trainctl holding the stack (`gc` looking at it, a destroy) rather than leave the run part-way.
RUN_STEP_WAIT_S = 600.0


def lock_of(run: LanguageRun, doing: str, run_id: str | None = None, *, reporter: Reporter | None = None):
    """The language's stack lock, held for `doing` (what a trainctl turned away reads). With a `reporter`: a step of
    a run under way, which waits for the lock up to RUN_STEP_WAIT_S, saying so, instead of being turned away."""
    if reporter is None:
        return stack_lock(run.project, run.env, run.stack, lang=run.lang, doing=doing, run_id=run_id)

    def waiting(why: str) -> None:
        reporter.info(f"{why}; waiting for it (up to {RUN_STEP_WAIT_S / 60:g} min) before {doing}")

    return stack_lock(
        run.project,
        run.env,
        run.stack,
        lang=run.lang,
        doing=doing,
        run_id=run_id,
        wait_s=RUN_STEP_WAIT_S,
        on_wait=waiting,
    )


def active_run(run: LanguageRun) -> str | None:
    """The run id the stack currently holds, if it is applied."""
    run_id = run.tf.outputs().get("run_id")
    return str(run_id) if run_id else None


def stack_run(run: LanguageRun) -> tuple[str | None, str | None]:
    """(the run the stack was applied for, its live state): the one "ended run" rule of `train` (tear the
    stack down and start anew) and `gc` (destroy it). State None: the run has ended, or never will start."""
    current = active_run(run)
    if not current:
        return None, None
    return current, live_state(run.bucket, run.lang, current, run.target.status_appear_timeout_s)


RECENT_RUNS = 10  # the newest run folders looked at for a live run (one run per language at a time)


def holds_live_run(run: LanguageRun, echo=None) -> bool:
    """Whether the language's stack holds a run that is still going; False when that cannot be told (the caller's
    own error is the one to show). The bucket is asked first, so nothing is synthesized unless a recent run of
    the language is live; then the stack (synthesized without a placement) says whether it holds it."""
    from stacks.runs.records import run_ids

    try:
        appear_s = run.target.status_appear_timeout_s
        if not any(live_state(run.bucket, run.lang, r, appear_s) for r in run_ids(run.bucket, run.lang)[-RECENT_RUNS:]):
            return False
        run.placement, run.tf = None, synth_and_init(run.project, run.config, run.stack, echo)
        return stack_run(run)[1] is not None
    except Exception:
        return False


def write_run_metadata(run: LanguageRun) -> None:
    """metadata/: what was applied for the run (env, stack, versions, machine, placement, cost estimate)."""
    bucket, run_id = run.bucket, run.run_id
    stack_json = run.project.work_outdir(run.env) / "stacks" / run.stack / "cdk.tf.json"
    meta = {
        "env": run.env,
        "lang": run.lang,
        "run_id": run_id,
        "stack": run.stack,
        "git_sha": git_sha(run.project.root),
        "host": platform.node(),
        "terraform": terraform_version(run.tf.binary),
    }
    settings = run.settings
    meta.update(
        target=run.config.target,
        spot=settings.spot,
        rung=settings.rung,
        nodes=settings.nodes,
        max_run_hours=settings.max_run_hours,
    )
    meta.update(run.target.run_metadata(run.config, run.lang, run.placement, bucket))
    prefix = "metadata/"
    config_key = run_key(run.lang, run_id, prefix + "config.json")
    # the settings the run started with: a resume or a move never rewrites them (a resume's changes: changes.json)
    bucket.write_bytes(config_key, run.config.model_dump_json(indent=2).encode(), if_absent=True)
    bucket.write_bytes(run_key(run.lang, run_id, prefix + "stack.json"), stack_json.read_bytes())
    bucket.write_bytes(run_key(run.lang, run_id, TRAINCTL_META), json.dumps(meta, indent=2).encode())


def git_sha(root: Path) -> str | None:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    return out.stdout.strip() or None


def launch(run: LanguageRun, reporter: Reporter, *, resume: str | None = None, new_id: str | None = None) -> bool:
    """Apply the stack for a new run (`new_id`, else a new id) or for `resume` (a stopped run continued from its
    checkpoints), or take the active run -> whether it attached; run.run_id is set."""
    next_id = resume or new_id or new_run_id()
    with lock_of(run, f"{'resuming' if resume else 'starting'} run {next_id}", next_id) as hold:
        current, state = stack_run(run)
        if current:
            if state is not None:
                if resume and current != resume:
                    raise RunActiveError(
                        f"run {current} of {run.lang} is active in env {run.env}; one run per language at a time",
                        hint=f"wait for it (trainctl train {run.lang} "
                        f"attaches) or stop it (trainctl destroy {run.lang}), then resume {resume}",
                    )
                reporter.info(
                    f"a {run.lang} run is already active in env {run.env} "
                    f"({current}, {state}); following it instead of starting another"
                )
                hold.doing(f"attaching to run {current}", current)
                run.run_id = current
                return True
            reporter.info(f"tearing down the ended run {current} left in {run.stack}")
            hold.doing(f"tearing down the ended run {current} to start run {next_id}", next_id)
            run.tf.destroy({"run_id": current})
        if resume:
            reopen(run, resume, reporter)
        run.run_id = next_id
        hold.doing(f"{'resuming' if resume else 'starting'} run {run.run_id}", run.run_id)
        reporter.info(f"applying {run.stack} (run {run.run_id})")
        run.tf.apply({"run_id": run.run_id})
        write_run_metadata(run)
        return False


class RunActiveError(TrainstackError):
    """Another run of the language holds the stack (exit 2)."""


class RunStoppedError(TrainstackError):
    """The run was stopped by another command (`trainctl destroy`) while this one waited to place it (exit 1)."""

    exit_status = ExitStatus.RUN_FAILED


def stopped_elsewhere(run: LanguageRun) -> str | None:
    """Why the run has ended while no stack held it (its final status, written by another command), or None."""
    from trainer.runfiles.status_file import read_status

    try:
        status = read_status(run.bucket, run.lang, run.run_id)
    except TrainstackError:
        return None  # unreadable now: the apply goes on, and the follow after it reads it again
    if status is None or not status.terminal:
        return None
    return status.state + (f": {status.error}" if status.error else "")


def live_runs_between_placements(run: LanguageRun) -> list[str]:
    """The language's recent runs that may still be going, newest first: with no stack holding them, they are
    between placements (a move, a wait for capacity) and whoever follows them applies the stack again."""
    from stacks.runs.records import run_ids

    appear_s = run.target.status_appear_timeout_s
    recent = run_ids(run.bucket, run.lang)[-RECENT_RUNS:]
    return [r for r in reversed(recent) if live_state(run.bucket, run.lang, r, appear_s)]


def reopen(run: LanguageRun, run_id: str, reporter: Reporter) -> None:
    """Make a stopped run resumable by its trainer (status no longer final); refuse one that cannot be (exit 2)."""
    import math
    import time

    from stacks.errors import RunNotFoundError
    from stacks.runs.resume_check import check_resume, record_changes, said
    from trainer.runfiles.keys import run_prefix
    from trainer.runfiles.run_ids import run_started_at
    from trainer.runfiles.status_file import read_status, write_status
    from trainer.runfiles.timestamps import now_iso

    status = read_status(run.bucket, run.lang, run_id)
    if status is None and not run.bucket.list(run_prefix(run.lang, run_id)):
        raise RunNotFoundError(
            f"no run {run_id} of {run.lang} in {run.config.bucket}",
            hint=f"trainctl runs --lang {run.lang} --env {run.env} lists them",
        )
    if status is not None and status.job != run.job:
        raise TrainstackError(
            f"run {run_id} is a {status.job} run, not {run.job}", hint="resume it with the command that started it"
        )
    if status is not None and status.state == SUCCEEDED:
        raise TrainstackError(
            f"run {run_id} of {run.lang} already SUCCEEDED: nothing to resume",
            hint=f"start a new run: trainctl train {run.lang} --env {run.env}",
        )
    changes = check_resume(run, run_id)  # the model, the data, the trainer's arguments: as the run started
    started = run_started_at(run_id)
    budget_h = run.settings.max_run_hours
    if started is not None and time.time() > started + budget_h * 3600 - 600:
        # Every launcher counts max_run_hours from the run's start (the id's time), resumes included.
        needed = math.ceil((time.time() - started) / 3600 + budget_h)
        raise TrainstackError(
            f"run {run_id} started {(time.time() - started) / 3600:.1f} h ago: past (or within "
            f"10 min of) max_run_hours={budget_h:g}, which counts from a run's start",
            hint=f"give it room: {resume_command(run.lang, run.env, run_id)} "
            f"--set languages.{run.lang}.max_run_hours={needed}",
        )
    if status is not None and status.terminal:
        reporter.info(f"resuming run {run_id} (it stopped: {(status.error or 'FAILED').splitlines()[0][:200]})")
        status.state, status.stage, status.error, status.finished_at = PENDING, INTERRUPTED_STAGE, None, None
        write_status(run.bucket, status)
        set_aside_vm_notes(run.bucket, run.lang, run_id)
        run.bucket.append(
            run_key(run.lang, run_id, "log.txt"),
            f"{now_iso().replace('+00:00', 'Z')} resumed by trainctl (--resume)\n".encode(),
        )
    else:
        reporter.info(f"resuming run {run_id} from its checkpoints")
        refresh_status(run.bucket, run.lang, run_id)
    if changes:
        reporter.info(f"changed for the rest of run {run_id}: {said(changes)} (recorded in metadata/changes.json)")
    record_changes(run, run_id, changes)


def refresh_status(bucket, lang: str, run_id: str) -> None:
    """A run placed again (a move, a resume) without a final status: its status.json written again now. The nodes
    of a multi-node run count their wait to meet again (trainer.launchers.vm.spec.JOIN_TIMEOUT_S) from its
    `updated_at`: left at the preemption, a move longer than that wait would have its first new VM fail the run.
    A write of the trainer's meanwhile wins (conditional on the version read)."""
    from trainer.runfiles.status_file import RunStatus
    from trainer.runfiles.timestamps import now_iso

    key = run_key(lang, run_id, "status.json")
    found = bucket.read_versioned(key)
    if not found:
        return
    status = RunStatus.from_json(found[0])
    if status.terminal:
        return
    status.updated_at = now_iso()
    bucket.write_bytes(key, status.to_json(), if_version=found[1])


def set_aside_vm_notes(bucket, lang: str, run_id: str) -> None:
    """A VM's start-up notes of an earlier attempt (vm/*-startup-error.txt) move to vm/before-resume/*.old: read
    as this attempt's, they would stop the resumed run at once."""
    from trainer.runfiles.keys import run_key as key_of

    for key in bucket.list(key_of(lang, run_id, "vm/")):
        if key.endswith("-startup-error.txt"):
            name = key.rsplit("/", 1)[1]
            kept = key_of(lang, run_id, f"vm/before-resume/{name.removesuffix('.txt')}.old")
            bucket.write_bytes(kept, bucket.read_bytes(key))
            bucket.delete(key)


def reapply(run: LanguageRun, placement, reporter: Reporter, echo=None) -> None:
    """Apply the stack again at `placement` for the same run id (the run moves; it resumes from its checkpoint).
    A stack another command applied meanwhile (a new run, a resume) is never applied over: RunActiveError."""
    with lock_of(run, f"moving run {run.run_id}", run.run_id, reporter=reporter):
        run.placement = placement
        run.tf = synth_and_init(run.project, run.config, run.stack, echo, {run.lang: placement} if placement else None)
        stopped = stopped_elsewhere(run)
        if stopped:
            raise RunStoppedError(
                f"run {run.run_id} was stopped while it waited for a placement ({stopped}): nothing applied",
                hint=f"continue it: {resume_command(run.lang, run.env, run.run_id)}",
            )
        current = active_run(run)
        if current and current != run.run_id:
            raise RunActiveError(
                f"run {current} of {run.lang} took {run.stack} while run {run.run_id} waited to move",
                hint=f"continue this one once that one ends: {resume_command(run.lang, run.env, run.run_id)}",
            )
        reporter.info(f"applying {run.stack} (run {run.run_id}) at {run.target.describe_placement(placement)}")
        refresh_status(run.bucket, run.lang, run.run_id)  # before its new VMs boot and read it
        run.tf.apply({"run_id": run.run_id})
        write_run_metadata(run)


def after_move_teardown(run: LanguageRun) -> None:
    """A VM its zone created between the decision to move and the teardown was stopped as cancelled (the local
    launcher says so, FAILED): the run is moving, not over, so it is made resumable again."""
    from trainer.runfiles.status_file import read_status, write_status

    status = read_status(run.bucket, run.lang, run.run_id)
    if status is not None and status.state == "FAILED" and (status.error or "").startswith("cancelled"):
        status.state, status.stage, status.error, status.finished_at = PENDING, INTERRUPTED_STAGE, None, None
        write_status(run.bucket, status)


def teardown(run: LanguageRun, reporter: Reporter) -> None:
    """Destroy the stack (for the run it holds: run.run_id, None when nothing was applied)."""
    doing = f"destroying {run.stack}" + (f" (run {run.run_id})" if run.run_id else "")
    with lock_of(run, doing, run.run_id, reporter=reporter):
        reporter.info(f"destroying {run.stack}")
        run.tf.destroy({"run_id": run.run_id} if run.run_id else None)
