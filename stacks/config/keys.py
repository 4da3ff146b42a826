"""Keys of the config checked where they enter it: language keys (plain names) and, for a key no model
has, the key it probably meant."""

from __future__ import annotations

import difflib
import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from stacks.config.models import EnvConfig
from stacks.errors import ConfigError

SET_SOURCE = "--set"
# A language key is its folder in the bucket and part of cloud resource names (the instance group
# <env>-train-<lang>, labels): what Compute Engine names allow, never a path.
LANGUAGE_KEY = re.compile(r"[a-z](?:[a-z0-9-]*[a-z0-9])?")


def check_language_key(lang: Any, source: str) -> None:
    """Refuse a key of `languages` that is not a plain lower-case name: it becomes a bucket folder (a path
    such as ../x or fr/x would leave or nest in another language's) and part of cloud resource names."""
    if isinstance(lang, bool):
        raise ConfigError(
            f"a language key was read as {str(lang).lower()}: YAML reads an unquoted no, off, yes or on as a boolean",
            source=source,
            hint=f"quote the key in {source}: 'no': {{}}",
        )
    key = str(lang)
    if LANGUAGE_KEY.fullmatch(key):
        return
    if isinstance(lang, str) and LANGUAGE_KEY.fullmatch(key.lower()):
        raise ConfigError(
            f"{key}: language keys are lower case: use `{key.lower()}`",
            source=source,
            hint=f"use languages.{key.lower()} in the --set"
            if source == SET_SOURCE
            else f"rename the key in {source} to {key.lower()}",
        )
    plain = "lower-case letters, digits and -, from a letter: fr, fr-ca"
    where = (
        f"write --set languages.LANG.KEY=VALUE with LANG of {plain}"
        if source == SET_SOURCE
        else f"rename it in {source} ({plain})"
    )
    raise ConfigError(
        f"language key {key!r} is not a plain name: it is the language's folder in the bucket "
        "and part of its cloud resource names",
        source=source,
        hint=f"{where}; a key that is no ISO 639-1 code gives its language as `code:` (gr: {{code: el}})",
    )


def _model_at(path: tuple) -> type[BaseModel] | None:
    """The model whose keys the mapping at `path` holds (languages.fr.trainer: TrainerSettings), if any."""
    kind: Any = EnvConfig
    for part in path:
        kind = optional_stripped(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(part)
            if field is None:
                return None
            kind = field.annotation
        elif get_origin(kind) in (dict, list):
            kind = get_args(kind)[-1]  # the part is a key of the mapping, or an index of the list
        else:
            return None
    kind = optional_stripped(kind)
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def optional_stripped(kind: Any) -> Any:
    if get_origin(kind) in (Union, types.UnionType):
        members = [k for k in get_args(kind) if k is not type(None)]
        if len(members) == 1:
            return members[0]
    return kind


def target_block_holding(holder: type[BaseModel], key: str) -> str | None:
    """The registered target whose block of `holder` (EnvConfig: the env's; LanguageSettings: a language's) has
    `key`, or None."""
    from stacks.config.targets import TARGETS

    for name in TARGETS:
        field = holder.model_fields.get(name)
        block = optional_stripped(field.annotation) if field is not None else None
        if block is not None and key in getattr(block, "model_fields", {}):
            return name
    return None


def _keys_of(model: type[BaseModel]) -> list[str]:
    # `env` is the overlay's name, set by the loader: never a key to suggest
    return [name for name in model.model_fields if (model, name) != (EnvConfig, "env")]


def meant_key(path: tuple) -> str | None:
    """The key an unknown key at `path` probably meant: the same name in a model below its level (`bs`
    at the top: defaults.trainer.bs), else a close spelling at its level (max_run_hour: max_run_hours)."""
    parent, name = path[:-1], path[-1]
    model = _model_at(parent)
    if model is None:
        return None
    level = [(model, parent)]
    while level:
        for sub, sub_path in level:
            if sub is not model and name in sub.model_fields:
                return ".".join((*sub_path, name))
        level = [
            (nested, (*sub_path, field))
            for sub, sub_path in level
            for field in _keys_of(sub)
            if (nested := _nested_model(sub, field)) is not None
        ]
    close = difflib.get_close_matches(name, _keys_of(model), n=1)
    return ".".join((*parent, close[0])) if close else None


def _nested_model(model: type[BaseModel], field: str) -> type[BaseModel] | None:
    """The model of a field that holds one mapping of keys (not a mapping of names, nor a list)."""
    kind = optional_stripped(model.model_fields[field].annotation)
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None
