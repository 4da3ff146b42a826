"""Where a trainstack project keeps things on the operator's machine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stacks.config import EnvConfig
from stacks.errors import ConfigError
from stacks.targets import load_env, target_of


@dataclass(frozen=True)
class Project:
    """A checkout holding cdktf.json and envs/; local state lives in .trainstack/."""

    root: Path

    @classmethod
    def discover(cls, start: Path | None = None) -> "Project":
        here = (start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / "cdktf.json").is_file() and (folder / "envs").is_dir():
                return cls(folder)
        raise ConfigError(
            f"no trainstack project here ({here}): no folder with cdktf.json and envs/ above it",
            hint="run trainctl from the project checkout (or a folder inside it)",
        )

    @property
    def envs_dir(self) -> Path:
        return self.root / "envs"

    def env_dir(self, env: str) -> Path:
        return self.root / ".trainstack" / env

    def state_file(self, env: str, stack: str) -> Path:
        """Terraform state of a stack on a local-backend env."""
        return self.env_dir(env) / "state" / f"{stack}.tfstate"

    def procs_dir(self, env: str) -> Path:
        """Pid and output files of locally launched trainers, one folder per run."""
        return self.env_dir(env) / "procs"

    def cores_dir(self) -> Path:
        """The ledger of CPU cores held by the local runs of this project, whatever their env
        (trainer.launchers.local.cores)."""
        return self.root / ".trainstack" / "cores"

    def work_outdir(self, env: str) -> Path:
        """trainctl's own synth output (per env, so envs never clobber each other)."""
        return self.env_dir(env) / "cdktf.out"

    def load(self, env: str, overrides: list[str] | None = None) -> EnvConfig:
        config = load_env(self.envs_dir, env, overrides)
        target_of(config).start_session(config, self)
        if config.bucket.startswith("file://") and not config.bucket.startswith("file:///"):
            local = (self.root / config.bucket[len("file://") :]).resolve()
            config = config.model_copy(update={"bucket": f"file://{local}"})
        return config
