"""Typed configuration: what envs/*.yaml may contain, after merging."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, create_model, field_validator, model_validator

from stacks.config.market import SpotMarketSettings
from stacks.config.strict import StrictModel
from stacks.errors import ConfigError
from trainer.params import JOBS, PARAMS, Job

# Boot images: chosen per machine series from the GPU catalogue (stacks/targets/gcp/catalogue.yaml)
# unless a language sets `boot_image`.


class GpuSettings(StrictModel):
    type: str | None = Field(None, description="accelerator type, e.g. nvidia-l4")
    count: int = Field(0, ge=0, le=16, description="accelerators per VM (0: none)")


class DataSettings(StrictModel):
    text_col: str = Field("text", description="the text column of the labelled data")
    label_col: str = Field("labels", description="the label column: a label, labels joined by label_sep, or a list")
    label_sep: str = Field(";", min_length=1, description="what separates several labels in one cell (multi-label)")
    label_cols: list[str] = Field([], description="one 0/1 column per label, instead of label_col")
    task: Literal["auto", "single_label", "multi_label"] = Field(
        "auto", description="auto: multi-label when a row has several labels (warned when under 1 % of rows)"
    )

    @model_validator(mode="after")
    def _text_is_not_a_label(self) -> "DataSettings":
        if self.text_col == self.label_col and not self.label_cols:
            raise ValueError(
                f"data.text_col and data.label_col are both {self.text_col!r}: a row's text is not its label"
            )
        if self.text_col in self.label_cols:
            raise ValueError(f"data.text_col {self.text_col!r} is also one of data.label_cols")
        return self


def _trainer_fields() -> dict:
    """The fields of TrainerSettings from trainer.params (the trainer's flags: one definition), and
    `job`, which a stack sets; in the order the trainer's arguments have always had."""
    fields = {}
    for name, p in PARAMS.items():
        if name == "base_lm":
            fields["job"] = (
                Literal[JOBS],
                Field(
                    Job.CLASSIFIER.value,
                    description="what a run of the stack does; `trainctl lm pretrain` sets pretrain-lm",
                ),
            )
        kind = Literal[p.choices] if p.choices else type(p.default)
        finite = {"allow_inf_nan": False} if kind is float else {}
        fields[name] = (
            kind,
            Field(p.default, ge=p.ge, gt=p.gt, lt=p.lt, le=p.le, pattern=p.pattern, description=p.help, **finite),
        )
    return fields


class _TrainerChecks(StrictModel):
    @model_validator(mode="after")
    def _token_cap_holds_batches(self):
        if 0 < self.max_lm_tokens < 100_000:
            raise ValueError(
                f"max_lm_tokens {self.max_lm_tokens:,} leaves a base LM a handful of batches: "
                "0 (no cap) or at least 100,000"
            )
        return self

    def as_cli_args(self) -> list[str]:
        """The trainer's command-line flags for these settings, in a stable order."""
        args: list[str] = []
        for name, value in self.model_dump().items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        return args


TrainerSettings = create_model("TrainerSettings", __base__=_TrainerChecks, **_trainer_fields())
TrainerSettings.__doc__ = (
    "Hyper-parameters passed to `python -m trainer` (fields, defaults, bounds, help: trainer.params)."
)


class LanguageSettings(StrictModel):
    """Settings of one language's training run (defaults, then languages.<lang>)."""

    code: str | None = Field(None, description="ISO 639-1 code of the language (default: its key), e.g. el for gr")

    machine_type: str = Field("g2-standard-8", description="gcp: the VM's machine type")
    gpu: GpuSettings = GpuSettings(type="nvidia-l4", count=1)
    spot: bool = Field(True, description="gcp: Spot VMs (preemptible, resumed from checkpoints) or on-demand")
    nodes: int = Field(1, ge=1, le=64, description="gcp: VMs of one run (data parallel over all their GPUs)")
    compact_placement: bool = Field(
        True,
        description="nodes > 1 (gcp): a best-effort COLLOCATED placement policy "
        "for lower latency between nodes; off: nodes go wherever capacity is",
    )
    processes: int = Field(1, ge=1, le=64, description="local target: trainer ranks (gloo, CPU) on this machine")
    cores: int = Field(
        0,
        ge=0,
        le=4096,
        description="local target: CPU cores the trainer is pinned to (0: all of "
        "the machine's); a local run finding fewer free cores queues until runs holding them end "
        "(`train --parallel N` sets each run's share)",
    )
    max_restarts: int = Field(3, ge=0, le=100, description="times an interrupted (preempted) run is resumed")
    max_run_hours: float = Field(
        6, gt=0, le=168, description="a run is stopped (checkpoint, FAILED) this long after it started"
    )
    creation_error_minutes: float = Field(
        10,
        gt=0,
        le=1440,
        description="while a run has no VM (before its first "
        "status.json, or after a preemption) how long its group may fail to create "
        "one (each error printed once) before `trainctl train` moves the run to its "
        "next zone (a capacity or quota error among them) or destroys the stack and "
        "exits 3 (only other errors, or a quota of every region)",
    )
    capacity_wait_minutes: float = Field(
        60,
        ge=0,
        le=10080,
        description="when every zone lacks capacity: how long "
        "`trainctl train` keeps trying them again (backoff) before it destroys the "
        "stack and exits 3, the run resumable (`train LANG --resume RUN_ID`); every "
        "zone is tried once first, even at 0",
    )
    on_demand_fallback: bool = Field(
        False,
        description="gcp, spot: take on-demand VMs once every zone lacked Spot "
        "capacity (at the on-demand price; said with the difference)",
    )
    disk_gb: int = Field(100, ge=10, description="gcp: boot disk size of each VM")
    disk_type: str = Field("pd-balanced", description="boot disk type (pd-balanced, pd-ssd, hyperdisk-balanced)")
    shm_size: str = Field(
        "16g", pattern=r"^\d+[kmg]?$", description="gcp: /dev/shm of the trainer container (data loader workers)"
    )
    boot_image: str | None = Field(
        None,
        description="VM boot image or image family (gcp); default: the machine "
        "series' image in the GPU catalogue (stacks/targets/gcp/catalogue.yaml)",
    )
    gpu_driver: str = Field(
        "latest",
        description="NVIDIA driver Container-Optimized OS installs at boot (gcp, COS "
        "images): default, latest, an exact version (580.95.05) or a branch (R580)",
    )
    secure_boot: bool | None = Field(
        None,
        description="Shielded VM Secure Boot (gcp); default: on where the boot "
        "image's driver is signed (COS), off otherwise",
    )
    docker_flags: list[str] = Field([], description="extra `docker run` flags for the trainer container (gcp)")
    data: DataSettings = DataSettings()
    trainer: TrainerSettings = TrainerSettings()

    @field_validator("gpu_driver", mode="before")
    @classmethod
    def _driver_as_written(cls, value):
        # YAML reads `gpu_driver: 580` as a number: keep it as written, for the gcp check to refuse
        # for what it says (stacks/targets/gcp/config_checks.py)
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


class MlflowSettings(StrictModel):
    """The team's MLflow server, which mirrors every run (credentials: MLflow's own variables, never here)."""

    uri: str | None = Field(
        None,
        description="tracking server URI (http(s)://HOST[:PORT], databricks, ...); "
        "unset: MLFLOW_TRACKING_URI, else no mirroring",
    )
    experiment: str | None = Field(
        None, description="experiment of this env's runs (default: MLFLOW_EXPERIMENT_NAME, else trainstack-<env>)"
    )
    registered_model: str = Field(
        "trainstack-{env}-{lang}",
        min_length=1,
        description="registered model a promoted run becomes a version of ({env}: the "
        "env, {lang}: its language; one per env, so a dev promotion never "
        "moves prod's alias)",
    )
    alias: str = Field(
        "champion",
        pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$",
        description="alias on the promoted run's version (moved at every promotion)",
    )

    @field_validator("uri")
    @classmethod
    def _a_tracking_uri(cls, uri: str | None) -> str | None:
        """A URI MLflow can reach (a typo such as `http//host` would be read as a folder, and fail later)."""
        from urllib.parse import urlsplit

        if uri is None:
            return uri
        parts = urlsplit(uri)
        scheme = parts.scheme.split("+", 1)[0]
        if (
            (scheme in ("http", "https") and parts.hostname)
            or uri in ("databricks", "databricks-uc")
            or scheme in ("databricks", "databricks-uc", "file", "sqlite", "postgresql", "mysql", "mssql")
        ):
            return uri
        raise ValueError(
            f"{uri!r} is not a tracking URI: http(s)://HOST[:PORT], databricks, file:///PATH or a database URI "
            "(sqlite:///FILE)"
        )


class TrackingSettings(StrictModel):
    """Where runs are mirrored besides the bucket (the bucket stays the source of truth)."""

    mlflow: MlflowSettings = MlflowSettings()


class CiSettings(StrictModel):
    """Who may act as the CI service accounts (Workload Identity Federation)."""

    github_repository: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description="owner/name of the GitHub repository"
    )
    # The trust is pinned by ids (immune to renames): gh api repos/OWNER/NAME --jq '.id, .owner.id'
    github_repository_id: int | None = Field(None, ge=1, description="the repository's numeric id")
    github_repository_owner_id: int | None = Field(None, ge=1, description="the repository owner's numeric id")


class EnvConfigBase(StrictModel):
    """One environment's effective configuration; `EnvConfig` adds each target's own block (e.g. `gcp:`)."""

    env: str = Field(description="environment name (the overlay file's stem)")
    target: str = Field(
        "local", description="where runs go: local (this machine) or gcp (stacks/config/targets.py lists the targets)"
    )
    bucket: str = Field(description="the env's bucket: file://PATH (local) or gs://NAME (gcp)")
    ci: CiSettings = CiSettings()
    tracking: TrackingSettings = TrackingSettings()
    spot_market: SpotMarketSettings | None = Field(
        None, description="local target: simulate Spot capacity and preemptions (envs/local-spot.yaml)"
    )
    defaults: LanguageSettings = LanguageSettings()
    languages: dict[str, LanguageSettings]

    @field_validator("target")
    @classmethod
    def _target_is_registered(cls, name: str) -> str:
        from stacks.config.targets import TARGETS

        if name not in TARGETS:
            raise ValueError(f"no target {name!r}: expected one of {', '.join(TARGETS)}")
        return name

    @model_validator(mode="before")
    @classmethod
    def _target_block_by_default(cls, data):
        """The env's target reads its block (`gcp:`) with the block's defaults when the env sets none."""
        from stacks.config.targets import TARGETS

        entry = TARGETS.get(data.get("target", "local")) if isinstance(data, dict) else None
        if entry is not None and entry.settings and data.get(data.get("target", "local")) is None:
            data = {**data, data.get("target", "local"): {}}
        return data

    @model_validator(mode="after")
    def _only_its_own_target_block(self) -> "EnvConfigBase":
        from stacks.config.targets import TARGETS

        for name, entry in TARGETS.items():
            if name != self.target and entry.settings and getattr(self, name, None) is not None:
                raise ValueError(f"{name}: settings of target {name}, but the env's target is {self.target}")
        return self

    @model_validator(mode="after")
    def _bucket_scheme_matches_target(self) -> "EnvConfigBase":
        from stacks.config.targets import TARGETS

        scheme = self.bucket.split("://", 1)[0] if "://" in self.bucket else ""
        wanted = TARGETS[self.target].bucket_scheme
        if scheme != wanted:
            raise ValueError(f"bucket must be a {wanted}:// URI for target {self.target!r}, got {self.bucket!r}")
        return self

    @model_validator(mode="after")
    def _language_codes_are_known(self) -> "EnvConfigBase":
        from trainer.text.languages import check_code, default_tokenizer

        for key, settings in self.languages.items():
            code = settings.code or key
            tokenizer = settings.trainer.tokenizer
            problem = check_code(code, key=key, tokenizer=default_tokenizer(code) if tokenizer == "auto" else tokenizer)
            if problem:
                raise ValueError(f"languages.{key}: {problem}")
        return self

    def language(self, lang: str) -> LanguageSettings:
        return self.languages[lang]

    def require_target(self, name: str, message: str, hint: str) -> None:
        """Commands for one target only (quota, doctor, image build, bootstrap: gcp) refuse the others with exit 2."""
        if self.target != name:
            raise ConfigError(message, hint=hint)

    @property
    def bucket_name(self) -> str:
        return self.bucket.split("://", 1)[1].split("/", 1)[0]


def _with_target_blocks(base: type[EnvConfigBase]) -> type[EnvConfigBase]:
    """EnvConfig: `base` with one block per target that has settings of its own (stacks/config/targets.py names
    the model, in the target's package), so a target's keys live with its code and an env writes them under its
    name (`gcp: {project: …}`)."""
    from importlib import import_module

    from stacks.config.targets import TARGETS

    blocks = {}
    for name, entry in TARGETS.items():
        if entry.settings:
            module, _, attribute = entry.settings.partition(":")
            model = getattr(import_module(module), attribute)
            blocks[name] = (model | None, Field(None, description=f"target {name}: {model.__doc__.splitlines()[0]}"))
    return create_model("EnvConfig", __base__=base, __module__=__name__, **blocks)


EnvConfig = _with_target_blocks(EnvConfigBase)
