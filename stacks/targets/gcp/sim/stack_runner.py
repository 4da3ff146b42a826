"""A synthesized training stack applied and destroyed in the simulated cloud this command started, where Terraform
would apply it in Google Cloud (the google provider cannot run here): the lifecycle drives it as it drives
stacks.terraform.Terraform (init, apply, destroy, outputs). Its state lives as long as the simulated cloud."""

from __future__ import annotations

import shutil
from pathlib import Path

from stacks.targets.gcp.sim import deploy
from stacks.targets.gcp.sim.deploy import SimApplyError, SimState


class SimulatedStack:
    def __init__(self, workdir: Path, stack: str):
        from stacks.targets.gcp.sim.session import current, say_simulated

        self.session = current()
        if self.session is None:
            raise SimApplyError(
                f"simulated apply: no simulated Google Cloud is running for {stack}",
                hint="load the env through trainctl, which starts it",
            )
        self.workdir, self.stack, self.say = workdir, stack, say_simulated
        self.binary = shutil.which("terraform") or "terraform"  # what the run's metadata records as the tool
        self.state_file = self.session.states / f"{stack}.json"

    def init(self) -> None:
        return None  # no backend, no providers: the simulated cloud holds the state

    def apply(self, variables: dict[str, str] | None = None) -> str:
        state = deploy.apply(self.workdir, self.session.url, variables=variables, state_file=self.state_file)
        where = ", ".join(f"{name} in {zone}" for zone, name in state.groups)
        self.say(f"simulated apply of {self.stack}: group {where}, {len(state.templates)} template(s)")
        return ""

    def destroy(self, variables: dict[str, str] | None = None) -> str:
        state = deploy.destroy(self.workdir, self.session.url, state_file=self.state_file)
        if state.groups or state.templates:
            self.say(f"simulated destroy of {self.stack}: {len(state.groups)} group(s), its VMs and template deleted")
        return ""

    def outputs(self) -> dict[str, object]:
        return dict(SimState.load(self.state_file).outputs)

    def resources(self) -> list[str]:
        state = SimState.load(self.state_file)
        return [f"google_compute_instance_group_manager.{name}" for _, name in state.groups] + [
            f"google_compute_instance_template.{name}" for name in state.templates
        ]

    def plan(self, *args, **kwargs) -> str:
        raise SimApplyError(
            f"simulated: {self.stack} has no Terraform plan on the simulated cloud",
            hint="plan a real gcp env (e.g. --env dev); rehearse with trainctl train",
        )

    show_json = apply_saved = plan
