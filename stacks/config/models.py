"""Typed configuration: what envs/*.yaml may contain, after merging."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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

    epochs_base_lm: int = Field(10, ge=0)
    epochs_lm: int = Field(4, ge=0)
    epochs_clf: int = Field(6, ge=1)
    bs: int = Field(64, ge=1)
    lr: float = Field(2e-3, gt=0)
    lr_lm: float = Field(2e-3, gt=0)
    seq_len: int = Field(72, ge=8)
    drop_mult: float = Field(0.5, ge=0)
    seed: int = 42
    valid_pct: float = Field(0.2, gt=0, lt=1)
    emb_sz: int = Field(400, ge=8)
    n_hid: int = Field(1152, ge=8)
    n_layers: int = Field(3, ge=1)
    max_vocab: int = Field(60000, ge=100)
    min_freq: int = Field(2, ge=1)

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
