"""One language's run, resolved once and then filled in as it moves on: what `train`, `lm pretrain`,
`destroy` and `gc` pass from step to step (instead of config, language, settings, bucket and run id as
loose arguments), and what a command's view renders at the end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stacks.errors import UnknownLanguageError
from stacks.naming import stack_name

if TYPE_CHECKING:
    from stacks.config.models import EnvConfig, LanguageSettings
    from stacks.project import Project
    from stacks.targets import Target
    from trainer.params import Job
    from trainer.runfiles.status_file import RunStatus
    from trainer.storage import Bucket


# Where a language of a command is (what a Ctrl-C leaves behind: stacks.runs.orchestrate.RunsInterrupted).
# MOVING: the run's stack is being destroyed, waits for capacity or is applied at another placement; a Ctrl-C
# there stops the run, resumable (stacks.runs.runflow.stop_moving).
WAITING, PREPARING, APPLYING, FOLLOWING, MOVING, DESTROYING, DONE = (
    "waiting",
    "preparing",
    "applying",
    "following",
    "moving",
    "destroying",
    "done",
)


@dataclass
class LanguageRun:
    """Resolved once (`resolve`): the project, the env's config, the language and its settings, the bucket,
    the job its settings ask (`job`). Then: the stack's Terraform runner and the target's placement (stack_ops.
    open_stack), the run id (stack_ops.launch, or the run a stack holds), the final status (None when
    the command detached after the apply)."""

    project: "Project"
    config: "EnvConfig"
    lang: str
    settings: "LanguageSettings"
    opened_bucket: "Bucket | None" = None
    tf: object | None = None
    placement: object | None = None
    run_id: str | None = None
    status: "RunStatus | None" = None
    found_target: "Target | None" = None

    @property
    def bucket(self) -> "Bucket":
        """The env's bucket, opened on first use (a plan review never needs it, nor credentials for it)."""
        if self.opened_bucket is None:
            from trainer.storage import open_bucket

            self.opened_bucket = open_bucket(self.config.bucket)
        return self.opened_bucket

    @property
    def target(self) -> "Target":
        """Where the run goes (the env's target), looked up once per run."""
        if self.found_target is None:
            from stacks.targets import target_of

            self.found_target = target_of(self.config)
        return self.found_target

    @property
    def job(self) -> "Job":
        """What the run does: the language's trainer.job, set by the command (stacks.runs.orchestrate)."""
        from trainer.params import Job

        return Job(self.settings.trainer.job)

    @property
    def env(self) -> str:
        return self.config.env

    @property
    def stack(self) -> str:
        return stack_name(self.lang)

    @property
    def run_url(self) -> str:
        from trainer.runfiles.keys import run_prefix

        return self.bucket.url(run_prefix(self.lang, self.run_id))

    def url(self, name: str) -> str:
        """Where one of the run's files is (a local bucket's URL of a folder has no trailing /)."""
        from trainer.runfiles.keys import run_key

        return self.bucket.url(run_key(self.lang, self.run_id, name))


def language_settings(config: "EnvConfig", lang: str) -> "LanguageSettings":
    """The language's settings (defaults, then languages.<lang>); an unconfigured language: exit 2."""
    if lang not in config.languages:
        raise UnknownLanguageError(lang, config.env, sorted(config.languages))
    return config.language(lang)


def resolve(project: "Project", config: "EnvConfig", lang: str, *, bucket: "Bucket | None" = None) -> LanguageRun:
    """The language's run before anything is checked or created; an unconfigured language fails here (exit 2)."""
    return LanguageRun(project, config, lang, language_settings(config, lang), bucket)


def resume_command(lang: str, env: str, run_id: str) -> str:
    """The command that continues a stopped run from its checkpoints: every hint and status that offers it."""
    return f"trainctl train {lang} --env {env} --resume {run_id}"
