"""RunIdentity: the run id, fixed once per apply so every resource sees the same value."""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import DataResource, LocalExecProvisioner, TerraformResourceLifecycle


class RunIdentity(Construct):
    """Exposes `record` (terraform_data) and `run_id` (its output: stable until var.run_id changes)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        run_id: str,
        replace_on: str,
        provisioners: list[LocalExecProvisioner] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.record = DataResource(
            self,
            "record",
            input={"run_id": run_id},
            triggers_replace={"run_id": replace_on},
            # The generated fallback id changes at every plan; the applied run keeps its own.
            lifecycle=TerraformResourceLifecycle(ignore_changes=["input"]),
            # Provisioners of this resource see the id as ${self.output.run_id} (LocalTrainer).
            provisioners=provisioners,
        )
        self.run_id = self.record.get_string_attribute("output.run_id")
