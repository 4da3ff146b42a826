"""The run lifecycle behind `trainctl train/destroy/gc`: preflight, apply, follow, tear down.

No CLI code here: callers pass a `Reporter` for output, so the same steps serve
the CLI, the benchmark and the tests.
"""
from __future__ import annotations

import fcntl
import itertools
import json
import platform
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from stacks.config import EnvConfig, LanguageSettings
from stacks.errors import InfraError, UnknownLanguageError
from stacks.naming import stack_name
from stacks.project import Project
from trainer.data.labelled import LabelledData, load_labelled, unlabelled_key, unlabelled_texts
from trainer.records.runs import TRAINCTL_META, RunStatus, new_run_id, read_status, run_key, run_started_at
from trainer.storage import Bucket, open_bucket
from stacks.targets import target_of


class Reporter(Protocol):
    def info(self, message: str) -> None: ...
    def warn(self, message: str) -> None: ...
    def log_line(self, line: str) -> None: ...
    def progress(self, status: RunStatus) -> None: ...


def language_settings(config: EnvConfig, lang: str) -> LanguageSettings:
    if lang not in config.languages:
        raise UnknownLanguageError(lang, config.env, sorted(config.languages))
    return config.language(lang)


def preflight_data(bucket: Bucket, lang: str, settings: LanguageSettings) -> LabelledData:
    """The trainer's own validation, run before anything is created or written."""
    from trainer.text.preflight import check_tokenizer

    import importlib.util

    d = settings.data
    data = load_labelled(bucket, lang, text_col=d.text_col, label_col=d.label_col, label_sep=d.label_sep,
                         task=d.task, label_cols=tuple(d.label_cols))[0]
    if (key := unlabelled_key(bucket, lang)) is not None:  # its text column, before a GPU VM finds it missing
        unlabelled_texts(bucket.read_bytes(key), key, text_col=d.text_col, source=bucket.url(key))
    try:
        has_trainer = importlib.util.find_spec("fastai") is not None
    except ValueError:  # a module set to None in sys.modules
        has_trainer = False
    if not has_trainer:
        # an operator install without the trainer extra (gcp runs train in the image)
        data.warnings.append("tokenizer not checked before apply: this install lacks the trainer extra "
                             "(pip install 'trainstack[trainer]' to check it here)")
        return data
    # imports fastai/spaCy: seconds, but before any infrastructure
    check_tokenizer(lang, data.texts, code=settings.code, tokenizer=settings.trainer.tokenizer)
    return data


def preflight_corpus(bucket: Bucket, lang: str, settings: LanguageSettings) -> str:
    """A base-LM job needs corpus files; returns a one-line summary, or a DataError (exit 2)."""
    from trainer.data.labelled import corpus_keys
    from trainer.errors import DataError

    keys = corpus_keys(bucket, lang)
    if not keys:
        raise DataError(f"no corpus at {bucket.url(f'{lang}/data/corpus/')} (.txt or .txt.gz, one text per line)",
                        hint=f"stage it: trainctl data push {lang} FOLDER (holding corpus/*.txt[.gz])")
    return f"corpus ok: {len(keys)} file(s) under {bucket.url(f'{lang}/data/corpus/')}"


@dataclass
class StackHandle:
    """A synthesized, initialised stack of one language (`placement`: gcp zone/image decision)."""

    config: EnvConfig
    project: Project
    lang: str
    tf: "object"
    placement: "object | None" = None

    @property
    def name(self) -> str:
        return stack_name(self.lang)


def synth_and_init(project: Project, config: EnvConfig, name: str, echo=None, placements=None):
    """Synthesize stack `name` and `terraform init` it -> its Terraform runner."""
    from stacks.runs.terraform import Terraform, terraform_binary

    terraform_binary()  # fail fast (exit 3) before the slower synth
    from stacks.app import synth

    outdir = project.work_outdir(config.env)
    synth(config, project, outdir, placements=placements, only={name})
    tf = Terraform(outdir / "stacks" / name, name, echo=echo)
    tf.init()
    return tf


def open_stack(project: Project, config: EnvConfig, lang: str, echo=None, *, preflight: bool = False,
               reporter: Reporter | None = None, decided=None) -> StackHandle:
    """Synthesize (after the gcp preflight when asked) and `terraform init` a language's stack."""
    from stacks.runs.terraform import terraform_binary

    language_settings(config, lang)
    terraform_binary()  # before the preflight's cloud calls too
    placement = target_of(config).preflight(config, lang, reporter, decided=decided) if preflight else None
    tf = synth_and_init(project, config, stack_name(lang), echo, {lang: placement} if placement else None)
    return StackHandle(config, project, lang, tf, placement)


def open_foundation(project: Project, config: EnvConfig, echo=None):
    """Synthesize and `terraform init` the foundation stack of a gcp env -> its Terraform runner."""
    from stacks.naming import FOUNDATION

    return synth_and_init(project, config, FOUNDATION, echo)


@contextmanager
def stack_lock(project: Project, env: str, stack: str):
    """One trainctl at a time per stack: the active-run check and the apply are one step."""
    path = project.env_dir(env) / "locks" / f"{stack}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InfraError(f"another trainctl is applying or destroying {stack} in env {env}",
                             hint="wait for it to finish, then rerun") from None
        yield


def active_run(handle: StackHandle) -> str | None:
    """The run id the stack currently holds, if it is applied."""
    run_id = handle.tf.outputs().get("run_id")
    return str(run_id) if run_id else None


def write_run_metadata(bucket: Bucket, handle: StackHandle, run_id: str) -> None:
    stack_json = handle.project.work_outdir(handle.config.env) / "stacks" / handle.name / "cdk.tf.json"
    meta = {
        "env": handle.config.env, "lang": handle.lang, "run_id": run_id, "stack": handle.name,
        "git_sha": git_sha(handle.project.root), "host": platform.node(),
        "terraform": terraform_version(handle.tf.binary),
    }
    settings = handle.config.language(handle.lang)
    meta.update(target=handle.config.target, machine_type=settings.machine_type,
                gpu={"type": settings.gpu.type, "count": settings.gpu.count}, spot=settings.spot,
                nodes=settings.nodes, max_run_hours=settings.max_run_hours)
    if handle.placement is not None:
        from stacks.config.gpus import region_of

        region = region_of(handle.placement.zone)
        meta.update(image=handle.placement.image, zone=handle.placement.zone, region=region,
                    quota_metric=handle.placement.quota_metrics[0])
        try:  # bookkeeping after the apply: a pricing failure must not lose the run's metadata
            meta["cost_estimate"] = target_of(handle.config).estimate_record(handle.config, handle.lang, region, bucket)
        except Exception as exc:
            meta["cost_estimate"] = {"note": f"cost unknown: {exc}"}
    prefix = "metadata/"
    bucket.write_bytes(run_key(handle.lang, run_id, prefix + "config.json"),
                       handle.config.model_dump_json(indent=2).encode())
    bucket.write_bytes(run_key(handle.lang, run_id, prefix + "stack.json"), stack_json.read_bytes())
    bucket.write_bytes(run_key(handle.lang, run_id, TRAINCTL_META), json.dumps(meta, indent=2).encode())


def terraform_version(binary: str) -> str | None:
    out = subprocess.run([binary, "version", "-json"], capture_output=True, text=True).stdout
    try:
        return json.loads(out).get("terraform_version")
    except ValueError:
        return None


def git_sha(root: Path) -> str | None:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    return out.stdout.strip() or None


def live_state(bucket: Bucket, lang: str, run_id: str, appear_timeout_s: float) -> str | None:
    """The state of a run that may still be going (RUNNING, …, or STARTING before its first
    status.json: a Spot VM can take many minutes), None when it has ended or never will."""
    status = read_status(bucket, lang, run_id)
    if status is not None:
        return None if status.terminal else status.state
    started = run_started_at(run_id)
    young = started is not None and time.time() - started < appear_timeout_s
    return "STARTING" if young and vm_startup_error(bucket, lang, run_id) is None else None


def launch(handle: StackHandle, bucket: Bucket, reporter: Reporter) -> tuple[str, bool]:
    """Apply the stack for a new run, or return the active run. -> (run_id, attached)."""
    with stack_lock(handle.project, handle.config.env, handle.name):
        current = active_run(handle)
        if current:
            state = live_state(bucket, handle.lang, current, target_of(handle.config).status_appear_timeout_s)
            if state is not None:
                reporter.info(f"a {handle.lang} run is already active in env {handle.config.env} "
                              f"({current}, {state}); following it instead of starting another")
                return current, True
            reporter.info(f"tearing down the ended run {current} left in {handle.name}")
            handle.tf.destroy({"run_id": current})
        run_id = new_run_id()
        reporter.info(f"applying {handle.name} (run {run_id})")
        handle.tf.apply({"run_id": run_id})
        write_run_metadata(bucket, handle, run_id)
        return run_id, False


def teardown(handle: StackHandle, run_id: str | None, reporter: Reporter) -> None:
    with stack_lock(handle.project, handle.config.env, handle.name):
        reporter.info(f"destroying {handle.name}")
        handle.tf.destroy({"run_id": run_id} if run_id else None)


class LogTail:
    """New lines of a run's log.txt since the last call."""

    def __init__(self, bucket: Bucket, lang: str, run_id: str):
        self.bucket, self.key, self.offset = bucket, run_key(lang, run_id, "log.txt"), 0

    def new_lines(self) -> list[str]:
        chunk = self.bucket.read_from(self.key, self.offset)
        if chunk is None:
            return []
        end = chunk.rfind(b"\n") + 1  # only whole lines
        self.offset += end
        return chunk[:end].decode("utf-8", "replace").splitlines()


def follow(bucket: Bucket, lang: str, run_id: str, reporter: Reporter, *, poll_s: float = 1.0,
           launcher_alive: Callable[[], bool] | None = None, print_log: bool = True,
           appear_timeout_s: float = 180, give_up_at: float | None = None,
           notes_every: int = 12) -> RunStatus:
    """Print log lines and progress until the run ends; return its final status.

    `give_up_at` (epoch s): past it a run without a final status is reported instead of
    followed forever (the VM side stops at max_run_hours and marks the run FAILED).
    """
    tail = LogTail(bucket, lang, run_id)
    started = time.monotonic()
    dead_since = None
    for poll in itertools.count():
        for line in tail.new_lines() if print_log else []:
            reporter.log_line(line)
        status = read_status(bucket, lang, run_id)
        if status is not None:
            reporter.progress(status)
            if status.terminal:
                for line in tail.new_lines() if print_log else []:
                    reporter.log_line(line)
                return status
        # A VM that cannot (re)start the trainer leaves a note and stops its group.
        if (status is None or poll % notes_every == 0) and (note := vm_startup_error(bucket, lang, run_id)):
            raise InfraError(f"run {run_id} stopped on its VM: {note}",
                             hint=f"fix the cause, then `trainctl destroy {lang}` and train again")
        if status is None and time.monotonic() - started > appear_timeout_s:
            raise InfraError(f"run {run_id} wrote no status.json within {appear_timeout_s:.0f}s",
                             hint=f"look at the launcher's output; `trainctl destroy {lang}` tears the stack down")
        if give_up_at is not None and time.time() > give_up_at:
            raise InfraError(f"run {run_id} is past max_run_hours without a final status",
                             hint=f"`trainctl logs {lang} --run {run_id}`; `trainctl destroy {lang}` tears it down")
        if launcher_alive is not None and not launcher_alive():
            # The supervisor writes the final status before it exits; give storage a moment.
            dead_since = dead_since or time.monotonic()
            if time.monotonic() - dead_since > 10:
                raise InfraError(f"the trainer of run {run_id} is gone without a final status",
                                 hint=f"`trainctl logs {lang} --run {run_id}`; `trainctl destroy {lang}`")
        time.sleep(poll_s)
    raise AssertionError("unreachable")


def give_up_time(run_id: str, max_run_hours: float, grace_s: float = 15 * 60) -> float | None:
    """When following should stop waiting: the run's hard limit plus time for the VM side to act."""
    started = run_started_at(run_id)
    return None if started is None else started + max_run_hours * 3600 + grace_s


def vm_startup_error(bucket: Bucket, lang: str, run_id: str) -> str | None:
    """The first note a VM's start-up script left in `<run>/vm/` (images/trainer/startup.sh), if any."""
    notes = [k for k in bucket.list(run_key(lang, run_id, "vm/")) if k.endswith("-startup-error.txt")]
    return bucket.read_bytes(notes[0]).decode("utf-8", "replace").strip() or notes[0] if notes else None


def bucket_of(config: EnvConfig) -> Bucket:
    return open_bucket(config.bucket)
