"""Typed configuration: what envs/*.yaml may contain, after merging."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainer.cli import DEFAULTS as D


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must not silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSettings(StrictModel):
    type: str | None = Field(None, description="accelerator type, e.g. nvidia-l4")
    count: int = Field(0, ge=0, le=16)


class DataSettings(StrictModel):
    text_col: str = "text"
    label_col: str = "labels"
    label_sep: str = Field(";", min_length=1)


class TrainerSettings(StrictModel):
    """Hyper-parameters passed to `python -m trainer` (see `python -m trainer --help`)."""

    # Defaults come from the trainer's own CLI, so the two can never disagree.
    epochs_base_lm: int = Field(D["epochs_base_lm"], ge=0)
    epochs_lm: int = Field(D["epochs_lm"], ge=0)
    epochs_clf: int = Field(D["epochs_clf"], ge=1)
    bs: int = Field(D["bs"], ge=1)
    lr: float = Field(D["lr"], gt=0)
    lr_lm: float = Field(D["lr_lm"], gt=0)
    seq_len: int = Field(D["seq_len"], ge=8)
    drop_mult: float = Field(D["drop_mult"], ge=0)
    seed: int = D["seed"]
    valid_pct: float = Field(D["valid_pct"], gt=0, lt=1)
    emb_sz: int = Field(D["emb_sz"], ge=8)
    n_hid: int = Field(D["n_hid"], ge=8)
    n_layers: int = Field(D["n_layers"], ge=1)
    max_vocab: int = Field(D["max_vocab"], ge=100)
    min_freq: int = Field(D["min_freq"], ge=1)

    def as_cli_args(self) -> list[str]:
        """The trainer's command-line flags for these settings, in a stable order."""
        args: list[str] = []
        for name, value in self.model_dump().items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        return args


class LanguageSettings(StrictModel):
    """Settings of one language's training run (defaults, then languages.<lang>)."""

    machine_type: str = "g2-standard-8"
    gpu: GpuSettings = GpuSettings(type="nvidia-l4", count=1)
    spot: bool = True
    nodes: int = Field(1, ge=1, le=64)
    max_run_hours: float = Field(6, gt=0, le=168)
    disk_gb: int = Field(100, ge=10)
    shm_size: str = Field("16g", pattern=r"^\d+[kmg]?$")
    data: DataSettings = DataSettings()
    trainer: TrainerSettings = TrainerSettings()


class EnvConfig(StrictModel):
    """One environment's effective configuration."""

    env: str = Field(description="environment name (the overlay file's stem)")
    target: Literal["local", "gcp"] = "local"
    project: str | None = None
    region: str | None = None
    zones: list[str] = []
    bucket: str
    image: str | None = None
    defaults: LanguageSettings = LanguageSettings()
    languages: dict[str, LanguageSettings]

    @model_validator(mode="after")
    def _bucket_scheme_matches_target(self) -> "EnvConfig":
        scheme = self.bucket.split("://", 1)[0] if "://" in self.bucket else ""
        wanted = "file" if self.target == "local" else "gs"
        if scheme != wanted:
            raise ValueError(
                f"bucket must be a {wanted}:// URI for target {self.target!r}, got {self.bucket!r}"
            )
        return self

    def language(self, lang: str) -> LanguageSettings:
        return self.languages[lang]
