"""Where a run executes. One package per target (local/, gcp/: everything of that target: its constructs, checks,
commands), one interface (`Target`), found through the registry (stacks/config/targets.py): the rest of the
operator side asks `target_of(config)` instead of testing `config.target`. Adding a target: docs/design.md."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from stacks.cdk import TerraformStack
    from stacks.config.models import EnvConfig
    from stacks.constructs.train_stack import TrainStack
    from stacks.targets.advice import CapacityAdvice
    from stacks.targets.checks import Check
    from trainer.launchers.run_spec import RunSpec
    from trainer.storage import Bucket


class TargetPlan(Protocol):
    """What a target puts in a plan: its part of the training stack, the stacks before it, how they are applied,
    and what a saved plan says and costs."""

    def training_part(
        self, spec: "RunSpec", config: "EnvConfig", project, *, python: str, placement
    ) -> Callable[["TrainStack"], str]:
        """This target's part of `train-<lang>` (stacks.constructs.train_stack) for the run `spec` (what every
        target's launcher reads; its own settings are the config's): a function that adds the backend and the
        resources running the trainer to the stack and returns the run id as the apply fixes it."""

    def before_training(self, app, config: "EnvConfig", name: str) -> "TerraformStack":
        """The stack `name` of `stacks_before_training`, added to `app`."""

    def left_out_of_app(self, config: "EnvConfig") -> dict[str, str]:
        """Stacks of `stacks_before_training` a plain `cdktf synth|deploy` leaves out -> why, for each."""

    def stack_runner(self, config: "EnvConfig", workdir: "Path", stack: str, echo=None):
        """What applies and destroys a synthesized stack in `workdir` (stacks.terraform.Terraform's init, apply,
        destroy, outputs): Terraform, unless the target deploys that stack another way (gcp: the simulated cloud)."""

    def prices_for_plan(self, config: "EnvConfig"):
        """The price book a plan review quotes, or None (no cloud cost)."""

    def quote_plan(self, plan, book: Callable[[], object]) -> dict | None:
        """What the planned machines cost by the price book `book()` returns (called only when there is something to
        price; it returns prices_for_plan's), stored with the plan (StackPlan.prices); None: nothing to price."""

    def plan_line(self, plan) -> str | None:
        """What a saved plan of this target's training stack runs where, and what one run costs (read from the plan
        alone, so a saved plan renders the same anywhere); None: not a training stack of this target."""


class TargetProvision(Protocol):
    """Where a run goes and how it is moved: preflight, placements, capacity, what must exist before an apply."""

    def preflight_together(self, config: "EnvConfig", langs: list[str], reporter) -> dict:
        """Before several languages are applied: refuse (naming the languages) what cannot run all at once;
        -> what was decided for each (passed back to `preflight` as `decided`)."""

    def preflight(self, config: "EnvConfig", lang: str, reporter, decided=None) -> object | None:
        """Checks before synth (quota, image); the placement the stack is synthesized with, if any.
        `decided`: what preflight_together chose for this language (it counted the others' share)."""

    def placements(self, config: "EnvConfig", lang: str, reporter, first=None, *, freed: bool = False) -> list:
        """Where the run may go, in order: `first` (the preflight's), then the others that can take it (gcp: other
        zones with quota; local: the simulated market's zones). The lifecycle moves a run along it. `freed`: the
        run's own GPUs at `first` count as free (a preempted run's VM holds them while it stops; the move deletes
        its group before it applies elsewhere)."""

    def describe_placement(self, placement) -> str:
        """A placement in a few words, for the operator's lines."""

    def zones(self, config: "EnvConfig", lang: str) -> list[list[str]]:
        """The zones the run's placements are drawn from, in tiers, each in the order the env gives ([]: nothing to
        rank; gcp: `zones`, then `fallback_zones`); stacks.runs.zone_ranking orders each tier by the project's
        preemption history and the cloud's advice, never a later tier's zone before an earlier one's."""

    def with_zone_order(self, config: "EnvConfig", lang: str, zones: list[str]) -> "EnvConfig":
        """The env with its zones in the order `zones` gives (the same zones), so `preflight` and `placements`
        try them in that order."""

    def capacity_advice(self, config: "EnvConfig", lang: str, zones: list[str]) -> "CapacityAdvice":
        """What the cloud says of the run's Spot capacity in each zone (stacks.targets.advice); never raises:
        an API the project may not call is a `note` ("no advice (403)")."""

    def placement_of_run(self, config: "EnvConfig", lang: str, bucket: "Bucket", run_id: str) -> object | None:
        """Where a run applied by an earlier command is now (re-attach: its last apply's record), None when
        nothing says; the lifecycle follows and moves the run from there."""

    def capacity_retry_s(self, config: "EnvConfig") -> tuple[float, float]:
        """The first and longest pause between passes over every placement when none has capacity."""

    def vm_running(self, project, config: "EnvConfig", lang: str, run_id: str, placement) -> bool | None:
        """The group's own view: is a VM of the run up? (asked before a run is moved; None: cannot tell)"""

    def require_artifacts(self, config: "EnvConfig") -> None:
        """Raise (exit 3) unless what a stack applied without a preflight needs is in place (`apply --reviewed`)."""

    def start_session(self, config: "EnvConfig", project) -> None:
        """Before a command uses the env: start what its commands talk to, for as long as the process lives (gcp: the
        simulated Google Cloud an env with `gcp.simulated` asks for); nothing for most."""

    def side_by_side_sets(self, config: "EnvConfig", runs: int) -> list[str]:
        """`--set` lines that let `runs` runs of this env share what they run on (local: each its share of the cores),
        applied before the user's own; [] where each run has machines of its own."""


class TargetObserve(Protocol):
    """What the lifecycle reads of a running run: creation errors, the launcher, cost, metadata, what it waits for."""

    def estimate(self, config: "EnvConfig", lang: str, bucket: "Bucket", reporter) -> None:
        """Say what the run will cost, before anything is created or billed."""

    def waiting_note(self, config: "EnvConfig", lang: str, placement) -> str | None:
        """What the operator waits for between the apply and the run's first status."""

    def creation_errors(
        self,
        config: "EnvConfig",
        lang: str,
        reporter,
        *,
        placement=None,
        bucket: "Bucket | None" = None,
        run_id: str | None = None,
        project=None,
    ) -> Callable[[], list] | None:
        """New errors creating the run's machines at each call (stacks.runs.watch.CreationProblem), or None;
        where they are is the `placement`'s, else what the run's metadata in `bucket` recorded."""

    def launcher_alive(self, project, env: str, run_id: str) -> Callable[[], bool] | None:
        """A check that whatever runs the trainer is still there (None: the target cannot tell)."""

    def run_cost(self, bucket: "Bucket", config: "EnvConfig", lang: str, run_id: str, status) -> dict:
        """The run's machines and estimated cost (keys of `trainctl runs --json`)."""

    def cost_note(self, cost: dict) -> str | None:
        """The line `train` prints about a finished run's cost."""

    def run_metadata(self, config: "EnvConfig", lang: str, placement, bucket: "Bucket") -> dict:
        """What metadata/trainctl.json keeps of the machine the run asked for and where it was placed (gcp: machine
        type, GPU, image, zone, region, quota metric, cost estimate); {} where there is nothing to say."""

    def runs_outlive_command(self, config: "EnvConfig") -> bool:
        """Whether a run goes on when the command that follows it exits (a Ctrl-C): False where the command holds
        what runs it (gcp: a simulated cloud the command started itself)."""


class TargetExtras(Protocol):
    """What a target adds to the operator's tools: its own commands, doctor's checks, its config checks."""

    def register_commands(self, app, kit) -> None:
        """Add this target's own commands to trainctl's `app` (typer). `kit` carries what every command uses:
        env_option, set_option (typer option types), load(env, sets) -> (project, config), console, err_console,
        print_table. Errors a command raises are told at the CLI's root (one line, an exit status)."""

    def doctor(self, config: "EnvConfig", echo: Callable[["Check"], None]) -> tuple[list["Check"], str]:
        """`trainctl doctor`: read-only checks that a first run can start, each echoed as it completes
        -> (the checks, what they do not cover)."""
        ...

    def check_config(self, config: "EnvConfig", origin: dict) -> None:
        """Refuse (ConfigError, exit 2) an env this target cannot deploy as written; `origin` names each key's file."""


class Target(TargetPlan, TargetProvision, TargetObserve, TargetExtras, Protocol):
    """`project` arguments are the operator's stacks.project.Project (its folders for state, processes, cores)."""

    name: str
    status_appear_timeout_s: float  # a run applied this long ago without status.json is not starting any more
    poll_s: float  # how often `train` reads the run's status while following it
    stacks_before_training: tuple[str, ...]  # stacks an env plans besides train-<lang> (the foundation)
    runs_side_by_side: bool  # `train fr en`: all at once by default (own machines), or one after another


def registered() -> list[str]:
    """The targets' names, as stacks/config/targets.py lists them."""
    from stacks.config.targets import TARGETS

    return list(TARGETS)


def by_name(name: str) -> Target:
    from importlib import import_module

    from stacks.config.targets import TARGETS

    if name not in TARGETS:
        raise ValueError(f"no target {name!r} in stacks/config/targets.py (expected one of {', '.join(TARGETS)})")
    module, _, attribute = TARGETS[name].code.partition(":")
    return getattr(import_module(module), attribute)


def target_of(config: "EnvConfig") -> Target:
    return by_name(config.target)


def load_env(envs_dir: "Path", env: str, overrides: list[str] | None = None) -> "EnvConfig":
    """An env's config as a project loads it: validated by its model, then by its target (what only the
    target knows is wrong: a gcp zone outside its region, a machine without the GPU asked for)."""
    from stacks.config.loader import load_config_and_origin
    from stacks.config.targets import export_bucket_openers

    export_bucket_openers()
    config, origin = load_config_and_origin(envs_dir, env, overrides)
    target_of(config).check_config(config, origin)
    return config
