"""Checks that only make sense on target gcp, with errors that name the key and its file."""

from __future__ import annotations

from collections.abc import Callable

from stacks.config.models import EnvConfig, LanguageSettings, LanguageSettingsBase
from stacks.errors import ConfigError
from stacks.targets.gcp.gpus import (
    COS_GPU_DRIVERS,
    DRIVER_FORM,
    IMAGE_MIN_DRIVER,
    boot_image_problem,
    default_boot_image,
    gpu_problem,
    machine_limit_problems,
    region_of,
    rung_problem,
)
from stacks.targets.gcp.provider_release import flex_start_problem

_Source = Callable[..., str]  # source(*key_path) -> the file that set the key (or the nearest key above it)


def check_gcp(config: EnvConfig, origin: dict[tuple, str]) -> None:
    """Raise ConfigError (exit 2) for a gcp environment that cannot be deployed as written (GcpTarget.check_config)."""
    env_file = f"envs/{config.env}.yaml"

    def source(*path: str) -> str:
        for n in range(len(path), 0, -1):
            if path[:n] in origin:
                return origin[path[:n]]
        return env_file

    _check_placement(config, env_file, source)
    # ci.github_repository is checked where it is used: the foundation stack (foundation_stack.py).
    for lang, settings in config.languages.items():
        _check_language(lang, settings, origin, source)
        _check_rungs(lang, settings, origin, source, simulated=config.gcp.simulated is not None)


def _check_placement(config: EnvConfig, env_file: str, source: _Source) -> None:
    """The env-wide keys: a project, region and zones that belong together."""
    if not config.gcp.project:
        raise ConfigError(
            f"env {config.env!r} targets gcp but sets no `gcp.project`",
            source=env_file,
            hint=f"add `gcp: {{project: YOUR_PROJECT_ID}}` to {env_file} or pass --set gcp.project=YOUR_PROJECT_ID",
        )
    if not config.gcp.region:
        raise ConfigError(
            f"env {config.env!r} targets gcp but sets no `gcp.region`",
            source=env_file,
            hint=f"add e.g. `region: europe-west4` to {env_file}",
        )
    if not config.gcp.zones:
        raise ConfigError(
            "`gcp.zones` is empty: list the zones of the region in order of preference",
            source=source("zones"),
            hint=f"e.g. zones: [{config.gcp.region}-a, {config.gcp.region}-b]",
        )
    for zone in config.gcp.zones:
        if region_of(zone) != config.gcp.region:
            raise ConfigError(
                f"zone {zone!r} is not in region {config.gcp.region!r}",
                source=source("zones"),
                hint="`gcp.zones` lists zones of `gcp.region`; put zones of other regions in `gcp.fallback_zones`",
            )
    for zone in config.gcp.fallback_zones:
        if region_of(zone) == config.gcp.region or zone.count("-") < 2:
            raise ConfigError(
                f"fallback zone {zone!r} must be a zone of another region than {config.gcp.region!r}",
                source=source("fallback_zones"),
            )


def _check_language(lang: str, settings: LanguageSettings, origin: dict[tuple, str], source: _Source) -> None:
    """One language's VMs: the machine type with its GPU, boot image, driver, disk and Spot settings."""
    problem = gpu_problem(settings.gcp.gpu.type, settings.gcp.gpu.count, settings.gcp.machine_type)
    if problem:
        key = ("languages", lang, "gcp", "gpu")
        src = origin.get(key) or origin.get(key + ("type",)) or source("defaults", "gcp", "gpu", "type")
        machine_src = _set_at(origin, source, lang, "machine_type")
        where = src if src == machine_src else f"{src} / {machine_src}"
        raise ConfigError(
            f"languages.{lang}: {problem}",
            source=where,
            hint="pick a matching gcp.machine_type and gcp.gpu (`trainctl config show` prints both)",
        )
    image = settings.gcp.boot_image or default_boot_image(settings.gcp.machine_type)
    problem = boot_image_problem(settings.gcp.machine_type, image)
    if problem:
        raise ConfigError(
            f"languages.{lang}: {problem}",
            source=_set_at(origin, source, lang, "boot_image"),
            hint="leave gcp.boot_image unset (the GPU catalogue's image for the series) or pick one "
            "listed in stacks/targets/gcp/gpus.py",
        )
    _check_gpu_driver(lang, settings.gcp.gpu_driver, origin, source)
    for setting, problem in machine_limit_problems(settings.gcp.machine_type, disk_type=settings.gcp.disk_type):
        raise ConfigError(
            f"languages.{lang}: {problem}",
            source=_set_at(origin, source, lang, setting),
            hint="the machine type cannot be created with this setting: change one of the two",
        )


def _check_rungs(
    lang: str, settings: LanguageSettings, origin: dict[tuple, str], source: _Source, *, simulated: bool
) -> None:
    """Each rung of the capacity ladder must be able to create the language's VMs: a rung that cannot would
    leave the run waiting on a group that never gets a VM once the rungs before it are dry."""
    ladder = ", ".join(settings.capacity)
    where = next(
        (
            origin[("languages", lang, k)]
            for k in ("capacity", "on_demand_fallback", "spot")
            if ("languages", lang, k) in origin
        ),
        None,
    ) or _set_at(origin, source, lang, "capacity")
    drop = f"drop {{rung}} from capacity [{ladder}]"
    for rung in settings.capacity:
        problem = rung_problem(settings.gcp.machine_type, rung)
        if problem:
            other = (
                "pick a3-highgpu-8g" if rung == "on_demand" else "pick a machine series flex-start offers (A2, A3, G2)"
            )
            raise ConfigError(
                f"languages.{lang}: capacity rung {rung} cannot serve this machine: {problem}",
                source=where,
                hint=f"{drop.format(rung=rung)}, or {other}",
            )
    if "flex_start" not in settings.capacity:
        return
    if settings.nodes > 1:
        # A resize request's VMs get names the group picks; a node reads its rank from its name (or its
        # per-instance config), which such VMs lack.
        raise ConfigError(
            f"languages.{lang}: capacity rung flex_start with nodes: {settings.nodes}: the VMs of a resize request "
            "are named by the group, and a node learns its rank from its name; only one-node runs take flex_start",
            source=where,
            hint=f"{drop.format(rung='flex_start')}, or set nodes: 1",
        )
    problem = None if simulated else flex_start_problem()
    if problem:
        raise ConfigError(
            f"languages.{lang}: capacity rung flex_start: {problem}",
            source=where,
            hint=f"{drop.format(rung='flex_start')}, or install bindings of a newer google provider "
            "(cdktn-provider-google of that release, or `cdktf provider add google` generated locally)",
        )


def _set_at(origin: dict[tuple, str], source: _Source, lang: str, setting: str) -> str:
    """The file that set a language's `setting`: under `languages.<lang>` (or `defaults`), in its `gcp` block
    unless every target reads it (spot, on_demand_fallback)."""
    path = (setting,) if setting in LanguageSettingsBase.model_fields else ("gcp", setting)
    return origin.get(("languages", lang, *path)) or source("defaults", *path)


def _check_gpu_driver(lang: str, gpu_driver: str, origin: dict[tuple, str], source: _Source) -> None:
    """gpu_driver must be a form the COS installer takes, and new enough for the trainer image's CUDA."""
    if not DRIVER_FORM.fullmatch(gpu_driver):
        raise ConfigError(
            f"languages.{lang}: gpu_driver {gpu_driver!r} is not a form `cos-extensions "
            "install gpu -- -version=` takes: default, latest, an exact version (580.95.05) or a "
            f"branch (R580, cos-gpu-installer >= 2.2.1) ({COS_GPU_DRIVERS})",
            source=_set_at(origin, source, lang, "gpu_driver"),
            hint="to pin the 580 branch write R580",
        )
    branch = gpu_driver.removeprefix("R").split(".", 1)[0]
    if branch.isdigit() and int(branch) < IMAGE_MIN_DRIVER:
        raise ConfigError(
            f"languages.{lang}: gpu_driver {gpu_driver} is older than the {IMAGE_MIN_DRIVER} "
            f"the trainer image's CUDA 13 needs ({COS_GPU_DRIVERS}): the run would train on the CPU",
            source=_set_at(origin, source, lang, "gpu_driver"),
            hint=f"set gcp.gpu_driver: latest or R{IMAGE_MIN_DRIVER}",
        )
