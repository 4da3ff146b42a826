from stacks.config.loader import available_envs, load_config
from stacks.config.models import EnvConfig, LanguageSettings, TrainerSettings

__all__ = ["available_envs", "load_config", "EnvConfig", "LanguageSettings", "TrainerSettings"]
