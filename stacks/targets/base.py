"""Defaults of every `Target` method (stacks.targets): a target derives from `TargetBase` and writes only what it
does. `training_part` alone has no default; the rest answer "nothing to say" (no placement, no cost, no extra
stack, no command of its own, Terraform applies its stacks)."""

from __future__ import annotations


class TargetBase:
    name: str = "?"
    status_appear_timeout_s: float = 180
    poll_s: float = 1.0
    stacks_before_training: tuple[str, ...] = ()
    runs_side_by_side: bool = True

    # plan
    def training_part(self, spec, config, project, *, python, placement):
        raise NotImplementedError(f"target {self.name} adds no training part to train-{spec.lang}")

    def before_training(self, app, config, name):
        raise ValueError(f"target {self.name} has no stack {name!r}")

    def left_out_of_app(self, config) -> dict[str, str]:
        return {}

    def stack_runner(self, config, workdir, stack, echo=None):
        from stacks.terraform import Terraform

        return Terraform(workdir, stack, echo=echo)

    def prices_for_plan(self, config):
        return None

    def quote_plan(self, plan, book):
        return None

    def plan_line(self, plan) -> str | None:
        return None

    # provision
    def preflight_together(self, config, langs, reporter) -> dict:
        return {}

    def preflight(self, config, lang, reporter, decided=None):
        return None

    def placements(self, config, lang, reporter, first=None, *, freed=False) -> list:
        return [first]

    def describe_placement(self, placement) -> str:
        return f"target {self.name}" if placement is None else str(placement)

    def zones(self, config, lang) -> list[list[str]]:
        return []

    def with_zone_order(self, config, lang, zones):
        return config

    def capacity_advice(self, config, lang, zones):
        from stacks.targets.advice import NO_ADVICE

        return NO_ADVICE

    def placement_of_run(self, config, lang, bucket, run_id):
        return None

    def capacity_retry_s(self, config) -> tuple[float, float]:
        return 60.0, 300.0

    def vm_running(self, project, config, lang, run_id, placement) -> bool | None:
        return None

    def require_artifacts(self, config) -> None:
        return None

    def start_session(self, config, project) -> None:
        return None

    def side_by_side_sets(self, config, runs: int) -> list[str]:
        return []

    # observe
    def estimate(self, config, lang, bucket, reporter) -> None:
        return None

    def waiting_note(self, config, lang, placement) -> str | None:
        return None

    def creation_errors(self, config, lang, reporter, *, placement=None, bucket=None, run_id=None, project=None):
        return None

    def launcher_alive(self, project, env, run_id):
        return None

    def run_cost(self, bucket, config, lang, run_id, status) -> dict:
        return {}

    def cost_note(self, cost: dict) -> str | None:
        return None

    def run_metadata(self, config, lang, placement, bucket) -> dict:
        return {}

    def runs_outlive_command(self, config) -> bool:
        return True

    # extras
    def register_commands(self, app, kit) -> None:
        return None

    def doctor(self, config, echo):
        return [], f"nothing: target {self.name} has no checks of its own"

    def check_config(self, config, origin) -> None:
        return None
