"""Load envs/base.yaml + envs/<env>.yaml + --set overrides into an EnvConfig.

Deep merge: mappings merge, lists and scalars replace. Every leaf remembers the
file it came from, so a validation error can name the key *and* the file.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from stacks.config.keys import SET_SOURCE, check_language_key, meant_key
from stacks.config.models import EnvConfig
from stacks.errors import ConfigError

ENV_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # an env is a file of envs/, never a path
SET_FORM = "--set key.path=value"


def available_envs(envs_dir: Path) -> list[str]:
    return sorted(p.stem for p in envs_dir.glob("*.yaml") if p.stem != "base")


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key written twice in one mapping is an error naming both lines (YAML itself
    keeps the last silently: a setting the user believes set would be another)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise DuplicateKey(key, seen[key] + 1, key_node.start_mark.line + 1)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key, first: int, again: int):
        super().__init__(f"key {key!r} is set twice in one mapping: lines {first} and {again}")
        self.key, self.first, self.again = key, first, again


def _read_yaml(path: Path, label: str) -> dict[str, Any]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"not UTF-8: byte {raw[exc.start]:#04x} on line {line}",
            source=label,
            hint=f"save {label} as UTF-8 (e.g. iconv -f latin1 -t utf-8 {label} > {label}.utf8, then move it back)",
        ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except DuplicateKey as exc:
        raise ConfigError(str(exc), source=label, hint=f"keep one of the two in {label}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"not valid YAML: {exc}",
            source=label,
            hint=f"fix {label} at the line named (indentation, a missing ':' or quote)",
        ) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        shape = "`key: value` lines (`target: local`, `defaults:` with its keys indented under it)"
        raise ConfigError(
            f"top level must be a mapping of keys to settings, not {_kind_of(data)}",
            source=label,
            hint=f"write {label} as {shape}; docs/config.md lists every key",
        )
    return data


def _kind_of(value: Any) -> str:
    if isinstance(value, list):
        return "a list (lines starting with `-`)"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    return f"a {type(value).__name__}"


def deep_merge(base: dict, over: dict, origin: dict[tuple, str], source: str, prefix=()) -> dict:
    """Merge `over` into a copy of `base`, recording each leaf's source in `origin`."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        path = prefix + (str(key),)
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value, origin, source, path)
        else:
            out[key] = copy.deepcopy(value)
            _record(origin, path, value, source)
    return out


def _record(origin: dict[tuple, str], path: tuple, value: Any, source: str) -> None:
    origin.pop(path, None)  # `origin` stays in the order keys were last written: the latest layer last
    origin[path] = source
    if isinstance(value, dict):
        for k, v in value.items():
            _record(origin, path + (str(k),), v, source)


def parse_set(expr: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a","b","c"], value parsed as YAML scalar/list)."""
    if "=" not in expr:
        example = (
            f"--set {expr.strip()}=VALUE"
            if re.fullmatch(r"[\w-]+(\.[\w-]+)*", expr.strip())
            else "--set defaults.trainer.bs=32"
        )
        raise ConfigError(
            f"{expr!r} is not of the form key.path=value", source=SET_SOURCE, hint=f"write {SET_FORM}, e.g. {example}"
        )
    key, raw = expr.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ConfigError(
            f"{expr!r}: the key path has an empty part (a key between each two dots)",
            source=SET_SOURCE,
            hint=f"write {SET_FORM}, e.g. --set defaults.trainer.bs=32",
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def _env_files(envs_dir: Path, env: str, seen: list[str]) -> list[Path]:
    """The env's file after the files of the envs it `extends` (an overlay of an overlay: envs/local-spot.yaml)."""
    path = envs_dir / f"{env}.yaml"
    label = f"envs/{path.name}"
    parent = _read_yaml(path, label).get("extends")
    if parent is None:
        return [path]
    if (
        not isinstance(parent, str)
        or parent == "base"
        or not ENV_NAME.fullmatch(parent)
        or not (envs_dir / f"{parent}.yaml").is_file()
    ):
        raise ConfigError(
            f"extends: {parent!r} is not an environment of {envs_dir.name}/",
            source=label,
            hint=f"name one of: {', '.join(available_envs(envs_dir))}",
        )
    if parent in seen or parent == env:
        raise ConfigError(f"extends goes round in a circle: {' -> '.join([*seen, env, parent])}", source=label)
    return [*_env_files(envs_dir, parent, [*seen, env]), path]


def merged_document(envs_dir: Path, env: str, overrides: list[str]) -> tuple[dict, dict[tuple, str]]:
    base_path = envs_dir / "base.yaml"
    env_path = envs_dir / f"{env}.yaml"
    known = available_envs(envs_dir)
    if env == "base":
        raise ConfigError(
            "base is not an environment: envs/base.yaml holds the defaults every env shares",
            hint=f"pick one with --env or TRAINCTL_ENV: {', '.join(known) or 'none yet'}",
        )
    if not ENV_NAME.fullmatch(env or ""):
        raise ConfigError(
            f"environment name {env!r} is not a plain name (letters, digits, - and _)",
            hint=f"pick one with --env or TRAINCTL_ENV: {', '.join(known) or 'none yet'}",
        )
    if not env_path.is_file():
        raise ConfigError(
            f"unknown environment {env!r}; available: {', '.join(known) or 'none'}",
            hint=f"pick one with --env or TRAINCTL_ENV, or create envs/{env}.yaml",
        )
    origin: dict[tuple, str] = {}
    doc: dict = {}
    for path in (base_path, *_env_files(envs_dir, env, [])):
        if path.is_file():
            label = f"envs/{path.name}"
            doc = deep_merge(doc, _read_yaml(path, label), origin, label)
    doc.pop("extends", None)
    for expr in overrides:
        parts, value = parse_set(expr)
        nested: Any = value
        for part in reversed(parts):
            nested = {part: nested}
        doc = deep_merge(doc, nested, origin, SET_SOURCE)
    return doc, origin


def _expand_languages(doc: dict, origin: dict[tuple, str]) -> dict:
    """languages.<lang> = defaults deep-merged with the language's own block."""
    out = dict(doc)
    defaults = doc.get("defaults") or {}
    langs = doc.get("languages")
    if langs is None:
        raise ConfigError(
            "no `languages` block: list at least one language",
            source=origin.get(("languages",), "envs/base.yaml"),
            hint="e.g. languages: {fr: {}} (with --set: --set languages.fr={})",
        )
    if not isinstance(langs, dict):
        raise ConfigError(
            "`languages` must be a mapping of language code to settings",
            source=origin.get(("languages",), "the config"),
            hint="e.g. languages: {fr: {}}",
        )
    for lang in langs:
        check_language_key(lang, _source_under(origin, ("languages", str(lang))))
    expanded = {}
    for lang, block in langs.items():
        if block is None:
            block = {}
        if not isinstance(block, dict) or not isinstance(defaults, dict):
            src = origin.get(("languages", str(lang)), "config")
            raise ConfigError(f"languages.{lang} must be a mapping", source=src)
        expanded[str(lang)] = deep_merge(defaults, block, {}, "")
    out["languages"] = expanded
    return out


def _latest_layer(layers: list[str]) -> str:
    """The last of these layers to be merged (`layers` in `origin`'s order: base.yaml, the env files each after
    the one it extends, then --set)."""
    return layers[-1]


def _source_under(origin: dict[tuple, str], path: tuple) -> str:
    """The layer that wrote `path`, else the latest that wrote a key under it."""
    if path in origin:
        return origin[path]
    layers = [src for key, src in origin.items() if key[: len(path)] == path]
    return _latest_layer(layers) if layers else "the config"


def _model_level_source(message: str, origin: dict[tuple, str]) -> tuple[str, str]:
    """Keys and file of an error a whole-config check raised (no location): the keys its message
    names (`bucket`, `languages.gr`), and the latest layer that set one of them or a key under
    them (--set, then the env file, then base.yaml)."""

    def named(path: tuple) -> bool:
        return re.search(rf"(?<![\w.]){re.escape('.'.join(path))}(?![\w])", message) is not None

    keys = [path for path in origin if named(path)]
    if not keys:
        return "", "the merged config (envs/base.yaml, the env's file and --set)"
    longest = max(len(k) for k in keys)
    keys = [k for k in keys if len(k) == longest]
    layers = [src for path, src in origin.items() if any(path[: len(k)] == k for k in keys)]
    return "", _latest_layer(layers)


def _source_of(loc: tuple, origin: dict[tuple, str], message: str = "") -> tuple[str, str]:
    """Key path and file for a pydantic error location."""
    path = tuple(str(p) for p in loc)
    if not path:
        return _model_level_source(message, origin)
    candidates = [path]
    if path[:1] == ("languages",) and len(path) > 2:
        candidates.append(("defaults",) + path[2:])
    for cand in candidates:  # a whole block's check: the latest layer that wrote a key in it
        layers = [src for key, src in origin.items() if key[: len(cand)] == cand]
        if layers:
            return ".".join(path), _latest_layer(layers)
    # The most specific recorded key wins (languages.fr.nodes from defaults.nodes over `fr: {}`).
    found = [
        (len(cand) - n, origin[cand[:n]]) for cand in candidates for n in range(len(cand), 0, -1) if cand[:n] in origin
    ]
    if found:
        return ".".join(path), min(found, key=lambda f: f[0])[1]
    return ".".join(path), "envs/base.yaml"


def load_config_and_origin(
    envs_dir: Path, env: str, overrides: list[str] | None = None
) -> tuple[EnvConfig, dict[tuple, str]]:
    """The env's config validated by its model, and the file (or --set) each key came from."""
    doc, origin = merged_document(envs_dir, env, list(overrides or []))
    doc = _expand_languages(doc, origin)
    doc["env"] = env
    try:
        return EnvConfig.model_validate(doc), origin
    except ValidationError as exc:
        raise _config_error(exc, origin, doc.get("target", "local")) from exc


def load_config(envs_dir: Path, env: str, overrides: list[str] | None = None) -> EnvConfig:
    """The env's config validated by its model; a project also has its target check it (stacks.targets.load_env)."""
    return load_config_and_origin(envs_dir, env, overrides)[0]


def _target_block_of(path: tuple) -> tuple[str, str] | None:
    """`gcp.project` for a top-level `project`, `defaults.gcp.machine_type` for `defaults.machine_type`: the key of
    a target's block (the env's, or a language's) an older overlay set outside it."""
    from stacks.config.keys import target_block_holding
    from stacks.config.models import LanguageSettings

    if len(path) == 1:
        holder, above, key = EnvConfig, (), path[0]
    elif (len(path) == 2 and path[0] == "defaults") or (len(path) == 3 and path[0] == "languages"):
        holder, above, key = LanguageSettings, path[:-1], path[-1]
    else:
        return None
    name = target_block_holding(holder, key)
    return (".".join((*above, name, key)), name) if name else None


_YAML_WORDS = {True: "yes", False: "no", None: "null"}  # what was likely typed, for the quoted example


def _set_key(loc: tuple, origin: dict[tuple, str]) -> str:
    """The key a --set wrote for this error's location: languages.fr.x, or the defaults.x it came from."""
    path = tuple(str(p) for p in loc)
    if path not in origin and path[:1] == ("languages",) and ("defaults", *path[2:]) in origin:
        path = ("defaults", *path[2:])
    return ".".join(path)


def _config_error(exc: ValidationError, origin: dict[tuple, str], target: str) -> ConfigError:
    lines, first_source = [], None
    seen = set()
    for err in exc.errors():
        key, source = _source_of(err["loc"], origin, err["msg"])
        if err["type"] == "extra_forbidden":
            path = tuple(str(p) for p in err["loc"])
            if path[:1] == ("languages",) and path not in origin:
                continue  # it came from `defaults`, and is reported there (once, in the file that has it)
            moved = _target_block_of(path)
            guess = meant_key(path)
            what = f"unknown key {key!r}" + (f" (did you mean {guess}?)" if guess else "")
            if moved and moved[1] == target:
                what = f"unknown key {key!r}: a target's settings sit in its own block now: {moved[0]}"
            elif moved:
                what = (
                    f"unknown key {key!r}: a setting of target {moved[1]} ({moved[0]}), which this env's target "
                    f"{target} does not read: remove it"
                )
        else:
            got = err.get("input")
            shown = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
            what = f"{key}: {err['msg']}{shown}" if key else f"{err['msg']}"
            if err["type"] == "string_type" and (got is None or isinstance(got, bool)):
                what += ": YAML reads an unquoted yes, no, on, off, true, false or null as that value, quote it"
                if source == SET_SOURCE:
                    what += f" (--set '{_set_key(err['loc'], origin)}=\"{_YAML_WORDS[got]}\"')"
        if (source, what) in seen:
            continue
        seen.add((source, what))
        first_source = first_source or source
        lines.append(f"{source}: {what}")
    message = lines[0] if len(lines) == 1 else "invalid configuration:\n  " + "\n  ".join(lines)
    return ConfigError(message, hint="fix the key(s) named above; `trainctl config show` prints the effective config")
