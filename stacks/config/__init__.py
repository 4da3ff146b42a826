"""An environment's configuration: envs/base.yaml, its overlay and --set merged (loader.py), typed and
validated (models.py; keys.py: language keys, and what an unknown key meant), the GPU catalogue (gpus.py),
price books (prices.py) and gcp-only checks (gcp_checks.py)."""

from stacks.config.loader import available_envs, load_config
from stacks.config.models import EnvConfig, LanguageSettings, TrainerSettings

__all__ = ["available_envs", "load_config", "EnvConfig", "LanguageSettings", "TrainerSettings"]
