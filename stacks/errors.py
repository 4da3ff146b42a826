"""Exit statuses and the exceptions trainctl maps to them (one place: stacks/cli/common.py, describe_error)."""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    SUCCESS = 0
    RUN_FAILED = 1
    BAD_INPUT = 2
    INFRA_ERROR = 3
    PLAN_CHANGES = 4  # `trainctl plan` only: the plan has changes
    INTERRUPTED = 130


class TrainstackError(Exception):
    """Base class: `message` says what is wrong, `hint` what to do next."""

    exit_status = ExitStatus.BAD_INPUT

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(TrainstackError):
    """The merged configuration is invalid; `source` names the file (or --set)."""

    def __init__(self, message: str, *, source: str | None = None, hint: str | None = None):
        super().__init__(f"{source}: {message}" if source else message, hint=hint)
        self.source = source


class UnknownLanguageError(TrainstackError):
    def __init__(self, lang: str, env: str, known: list[str]):
        # Language keys are lower-case codes: `FR` means `fr`, never a new key to add.
        hint = (
            f"did you mean {lang.lower()}? (language keys are lower case)"
            if lang.lower() in known
            else f"add `languages: {{{lang.lower()}: {{}}}}` to envs/{env}.yaml or pick one of the above"
        )
        super().__init__(
            f"language {lang!r} is not configured in env {env!r} (configured: {', '.join(known) or 'none'})", hint=hint
        )
        self.lang, self.env, self.known = lang, env, known


class InfraError(TrainstackError):
    """Terraform, quota or cloud API trouble."""

    exit_status = ExitStatus.INFRA_ERROR


class ToolMissingError(InfraError):
    def __init__(self, tool: str, how: str):
        super().__init__(f"{tool} is not on PATH", hint=how)
        self.tool = tool


class TerraformError(InfraError):
    def __init__(self, action: str, stack: str, output: str, workdir: str):
        tail = "\n".join(output.strip().splitlines()[-15:])
        super().__init__(
            f"terraform {action} of stack {stack} failed:\n{tail}",
            hint=f"inspect with `terraform -chdir={workdir} plan`; fix, then rerun",
        )
        self.action, self.stack, self.output = action, stack, output


class RunNotFoundError(TrainstackError):
    pass


class StackBusyError(TrainstackError):
    """Another command holds the stack (its trainctl lock or Terraform's state lock): rerun once it is done (exit 2)."""


class VmCreationError(InfraError):
    """No VM of a run could be created for `minutes` (only errors from its group, no VM running);
    `kinds`: of the errors (capacity, quota, every-region, other); `rules_out`: placements the same errors would
    meet too (each a predicate of a placement: a regional quota rules out its region's other zones)."""

    def __init__(
        self,
        run_id: str,
        minutes: float,
        last: str,
        *,
        hint: str,
        kinds: frozenset = frozenset(),
        rules_out: tuple = (),
    ):
        super().__init__(f"no VM of run {run_id} could be created in {minutes:g} min: {last}", hint=hint)
        self.run_id, self.minutes, self.last, self.kinds, self.rules_out = run_id, minutes, last, kinds, rules_out

    @property
    def movable(self) -> bool:
        """Capacity or quota was missing (another zone may have it), and no error is one every placement meets (a
        global quota). Compute Engine mixes kinds in one window: an error of another kind beside them (a transient
        one) does not pin the run to a dry zone."""
        return bool(self.kinds & {"capacity", "quota"}) and "every-region" not in self.kinds


class NoCapacityError(InfraError):
    """Every placement lacked capacity (or quota) for `capacity_wait_minutes`: the stack is destroyed, the run
    resumable."""


class TrackerUnavailable(InfraError):
    """The MLflow tracking server could not be reached or refused a request; `reason` in a few words."""

    def __init__(self, uri: str, reason: str, *, hint: str | None = None):
        super().__init__(f"MLflow at {uri}: {reason}", hint=hint)
        self.uri, self.reason = uri, reason
