"""Typed configuration: what envs/*.yaml may contain, after merging."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, create_model, field_validator, model_validator

from stacks.config.capacity import CapacityLadder
from stacks.config.exit_codes import RestartableExitCodes
from stacks.config.strict import StrictModel
from stacks.config.zone_choice import ZoneChoiceSettings
from stacks.errors import ConfigError
from trainer.params import JOBS, PARAMS, Job


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


class LanguageSettingsBase(CapacityLadder, ZoneChoiceSettings):
    """Settings of one language's training run (defaults, then languages.<lang>) that every target reads;
    `LanguageSettings` adds each target's own block (`gcp:` machine, GPU, disk; `local:` processes, cores)."""

    code: str | None = Field(None, description="ISO 639-1 code of the language (default: its key), e.g. el for gr")

    nodes: int = Field(1, ge=1, le=64, description="machines of one run (data parallel over all their accelerators)")
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
    max_restarts_on_errors: int = Field(
        0,
        ge=0,
        le=20,
        description="times a run that failed for a reason not its code's (a node lost, a driver that did not load, "
        "an exit code in restart_on_exit_codes) is restarted from its checkpoint; 0: a failure ends it",
    )
    restart_on_exit_codes: RestartableExitCodes = Field(
        [],
        description="the trainer's exit statuses that count as such a failure when it wrote no final status "
        "(128+N for a death by signal N: 137 an OOM kill, 134 an NCCL watchdog's abort)",
    )
    data: DataSettings = DataSettings()
    trainer: TrainerSettings = TrainerSettings()


def _target_fields(kind: str) -> dict:
    """One optional field per target that has settings of this `kind` ("settings": the env's block,
    "language_settings": a language's), the model named by its registry line (stacks/config/targets.py), in
    the target's package."""
    from importlib import import_module

    from stacks.config.targets import TARGETS

    fields = {}
    for name, entry in TARGETS.items():
        named = getattr(entry, kind)
        if named:
            module, _, attribute = named.partition(":")
            model = getattr(import_module(module), attribute)
            fields[name] = (model | None, Field(None, description=f"target {name}: {model.__doc__.splitlines()[0]}"))
    return fields


LanguageSettings = create_model(
    "LanguageSettings", __base__=LanguageSettingsBase, __module__=__name__, **_target_fields("language_settings")
)


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
        """The env's target reads its blocks (`gcp:`, `defaults.gcp`, `languages.<lang>.gcp`) with the blocks'
        defaults where the env sets none."""
        from stacks.config.targets import TARGETS

        if not isinstance(data, dict):
            return data
        name = data.get("target", "local")
        entry = TARGETS.get(name)
        if entry is None:
            return data
        if entry.settings and data.get(name) is None:
            data = {**data, name: {}}
        if entry.language_settings:

            def filled(block):
                return {**block, name: {}} if isinstance(block, dict) and block.get(name) is None else block

            data = {**data, "defaults": filled(data.get("defaults", {}))}
            if isinstance(data.get("languages"), dict):
                data["languages"] = {lang: filled(block) for lang, block in data["languages"].items()}
        return data

    @model_validator(mode="after")
    def _default_ladders_offered(self) -> "EnvConfigBase":
        from stacks.config.capacity import offer_default_ladders

        offer_default_ladders(self)
        return self

    @model_validator(mode="after")
    def _only_its_own_target_block(self) -> "EnvConfigBase":
        from stacks.config.targets import TARGETS

        for name, entry in TARGETS.items():
            if name == self.target:
                continue
            if entry.settings and getattr(self, name, None) is not None:
                raise ValueError(f"{name}: settings of target {name}, but the env's target is {self.target}")
            if entry.language_settings:
                for at, settings in [("defaults", self.defaults)] + [
                    (f"languages.{lang}", s) for lang, s in self.languages.items()
                ]:
                    if getattr(settings, name, None) is not None:
                        raise ValueError(
                            f"{at}.{name}: settings of target {name}, but the env's target is {self.target}"
                        )
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

    def as_document(self) -> dict:
        """The config as JSON-ready data, without the empty blocks of targets other than the env's."""
        from stacks.config.targets import TARGETS

        others = [name for name in TARGETS if name != self.target]
        data = self.model_dump(mode="json")
        for block in (data, data["defaults"], *data["languages"].values()):
            for name in others:
                if block.get(name, 0) is None:
                    del block[name]
        return data

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
    """EnvConfig: `base` with one block per target that has settings of its own, so a target's keys live with its
    code and an env writes them under its name (`gcp: {project: …}`)."""
    return create_model("EnvConfig", __base__=base, __module__=__name__, **_target_fields("settings"))


EnvConfig = _with_target_blocks(EnvConfigBase)
