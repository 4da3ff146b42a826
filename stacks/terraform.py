"""Run the real terraform binary in a synthesized stack folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from stacks.errors import StackBusyError, TerraformError, ToolMissingError

STATE_LOCKED = "Error acquiring the state lock"
INSTALL_HINT = (
    "install Terraform >= 1.5 (https://developer.hashicorp.com/terraform/install) "
    "and make sure `terraform version` works in this shell"
)


def terraform_binary() -> str:
    path = shutil.which("terraform")
    if path is None:
        raise ToolMissingError("terraform", INSTALL_HINT)
    return path


def terraform_version(binary: str) -> str | None:
    out = subprocess.run([binary, "version", "-json"], capture_output=True, text=True).stdout
    try:
        return json.loads(out).get("terraform_version")
    except ValueError:
        return None


class Terraform:
    """One stack's working folder (`cdktf.out/stacks/<stack>`)."""

    def __init__(self, workdir: Path, stack: str, *, echo=None):
        self.workdir, self.stack = workdir, stack
        self.binary = terraform_binary()
        self.echo = echo  # called with each output line when set (--debug)

    def _run(self, action: str, *args: str) -> str:
        env = {**os.environ, "TF_IN_AUTOMATION": "1", "TF_INPUT": "0", "CHECKPOINT_DISABLE": "1"}
        # stderr apart: warnings there must not corrupt `output -json`.
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(
                [self.binary, *args], cwd=self.workdir, env=env, text=True, stdout=subprocess.PIPE, stderr=err
            )
            lines = []
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if self.echo:
                    self.echo(line.rstrip("\n"))
            code = proc.wait()
            err.seek(0)
            errors = err.read()
        output = "".join(lines)
        if code != 0:
            if STATE_LOCKED in errors + output:
                raise self._state_locked(errors + output)
            raise TerraformError(action, self.stack, output + errors, str(self.workdir))
        return output

    def _state_locked(self, text: str) -> StackBusyError:
        """Another command holds the state's lock: who and since when, from Terraform's lock info when it has one."""
        info = dict(re.findall(r"^\s*(ID|Operation|Who|Created):\s*(\S.*?)\s*$", text, re.M))
        held = ", ".join(
            part
            for part in (
                info.get("Operation", "").removeprefix("OperationType").lower(),
                f"by {info['Who']}" if "Who" in info else "",
                f"since {info['Created'][:19]}" if "Created" in info else "",
            )
            if part
        )
        hint = "rerun once it is done"
        if "ID" in info:
            hint += f"; a lock that a killed terraform left: terraform -chdir={self.workdir} force-unlock {info['ID']}"
        return StackBusyError(
            f"Terraform's state of {self.stack} is locked by another command" + (f" ({held})" if held else ""),
            hint=hint,
        )

    @staticmethod
    def _vars(variables: dict[str, str] | None) -> list[str]:
        return [f"-var={k}={v}" for k, v in (variables or {}).items()]

    def init(self) -> None:
        # -reconfigure: the backend block is generated (e.g. another --set gcp.project=), never migrated.
        self._run("init", "init", "-input=false", "-no-color", "-reconfigure")

    def apply(self, variables: dict[str, str] | None = None) -> str:
        return self._run("apply", "apply", "-auto-approve", "-input=false", "-no-color", *self._vars(variables))

    def destroy(self, variables: dict[str, str] | None = None) -> str:
        return self._run("destroy", "destroy", "-auto-approve", "-input=false", "-no-color", *self._vars(variables))

    def plan(self, variables: dict[str, str] | None = None, *, lock: bool = True, out: Path | None = None) -> str:
        # -lock=false lets a read-only identity (the CI planner) plan against remote state.
        return self._run(
            "plan",
            "plan",
            "-input=false",
            "-no-color",
            *([] if lock else ["-lock=false"]),
            *([f"-out={out}"] if out else []),
            *self._vars(variables),
        )

    def show_json(self, planfile: Path) -> dict:
        """`terraform show -json` of a saved plan: what the plan renderer reads."""
        return json.loads(self._run("show", "show", "-json", "-no-color", str(planfile)))

    def apply_saved(self, planfile: Path) -> str:
        """Apply exactly a saved plan (Terraform refuses it if the state moved since)."""
        return self._run("apply", "apply", "-input=false", "-no-color", str(planfile))

    def outputs(self) -> dict[str, object]:
        raw = json.loads(self._run("output", "output", "-json", "-no-color") or "{}")
        return {k: v.get("value") for k, v in raw.items()}

    def resources(self) -> list[str]:
        out = self._run("state list", "state", "list", "-no-color")
        return [ln for ln in out.splitlines() if ln.strip()]
