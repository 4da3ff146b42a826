"""What a resumed run may change (`train LANG --resume RUN`): where and for how long it runs, never what it
computes or reads. Checked before anything is applied, against the settings the run started with
(metadata/config.json, never rewritten) and its own copy of its data (trainer.runtime.run_data)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from stacks.errors import TrainstackError
from trainer.runfiles.keys import CHECKPOINT_POINTER, DATA_RECORD, RUN_DATA, SETTINGS_CHANGES, run_key
from trainer.runfiles.readers import read_json
from trainer.runfiles.run_ids import run_started_at
from trainer.runfiles.timestamps import now_iso
from trainer.storage.checksums import Checksum

if TYPE_CHECKING:
    from stacks.runs.language_run import LanguageRun

# A language's settings a resume may change: how long it may run and be retried, and the machine it runs on, with
# the same accelerators and world size (each target's block names its own: `SAFE_ON_RESUME` of its model). Any other
# (the model, the data, the trainer's arguments, gpu, nodes, processes) would resume a checkpoint into another run,
# or record settings that never trained.
SAFE_ON_RESUME = frozenset(
    {
        "max_run_hours",
        "max_restarts",
        "creation_error_minutes",
        "capacity_wait_minutes",
        "on_demand_fallback",
        "spot",
        "capacity",
        "flex_start_wait_minutes",
        "max_restarts_on_errors",
        "restart_on_exit_codes",
        "zone_block_minutes",
        "zone_history_days",
    }
)
# The env's keys that are the run's identity: the bucket its files and data are in, and its target and env.
RUN_IDENTITY = ("env", "target", "bucket")


def _flat(doc: dict, prefix: str) -> dict[str, object]:
    out = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _in_target_blocks(settings: dict) -> dict:
    """A language's recorded settings with a target's keys in its block (`gpu` -> `gcp.gpu`), as a run started by a
    version before those blocks recorded them at the top."""
    from stacks.config.keys import target_block_holding
    from stacks.config.models import LanguageSettings, LanguageSettingsBase

    moved = {
        k: v
        for k, v in settings.items()
        if k in LanguageSettingsBase.model_fields or k in LanguageSettings.model_fields
    }
    for key, value in settings.items():
        if key in moved:
            continue
        block = target_block_holding(LanguageSettings, key)
        if block is None:
            moved[key] = value  # unknown today: kept, and compared only if it is still a key
        else:
            moved[block] = {**(moved.get(block) or {}), key: value}
    return moved


def _block_model(block: str):
    from stacks.config.keys import optional_stripped
    from stacks.config.models import LanguageSettings

    field = LanguageSettings.model_fields.get(block)
    return optional_stripped(field.annotation) if field is not None else None


def settings_changes(started: dict, now: dict, lang: str) -> list[tuple[str, object, object]]:
    """(key, as the run started, as now) for each setting of the run that differs: the env's identity and the
    language's settings (a key one side does not have, from another trainstack version, is not compared; a
    target's key recorded before its block is compared in it)."""
    before = {k: started.get(k) for k in RUN_IDENTITY} | _flat(
        _in_target_blocks((started.get("languages") or {}).get(lang) or {}), f"languages.{lang}."
    )
    after = {k: now.get(k) for k in RUN_IDENTITY} | _flat(now["languages"][lang], f"languages.{lang}.")
    return [(k, before[k], after[k]) for k in before if k in after and before[k] != after[k]]


def _is_safe(key: str, lang: str) -> bool:
    if not key.startswith(f"languages.{lang}."):
        return False
    setting = key.split(".", 2)[2]
    if setting in SAFE_ON_RESUME:
        return True
    block, _, leaf = setting.partition(".")
    return leaf in getattr(_block_model(block), "SAFE_ON_RESUME", ())


def safe_keys(target: str) -> list[str]:
    """The settings a resumed run of `target` may change: every target's, then its block's (`gcp.machine_type`)."""
    return [
        *sorted(SAFE_ON_RESUME),
        *(f"{target}.{k}" for k in sorted(getattr(_block_model(target), "SAFE_ON_RESUME", ()))),
    ]


def said(changes: list[tuple[str, object, object]]) -> str:
    return ", ".join(f"{key} {json.dumps(old)} -> {json.dumps(new)}" for key, old, new in changes)


def check_resume(run: LanguageRun, run_id: str) -> list[tuple[str, object, object]]:
    """Refuse (exit 2) a resume that would change what the run computes or reads -> the safe changes it makes."""
    started = read_json(run.bucket, run_key(run.lang, run_id, "metadata/config.json"))
    changes = [] if started is None else settings_changes(started, json.loads(run.config.model_dump_json()), run.lang)
    refused = [c for c in changes if not _is_safe(c[0], run.lang)]
    if refused:
        raise TrainstackError(
            f"run {run_id} of {run.lang} resumes with the settings it started with; these differ "
            f"(started -> now): {said(refused)}",
            hint=f"resume without the --set (or env edit) that changes them; only where and how long it runs may "
            f"change ({', '.join(safe_keys(run.config.target))}); for other settings start a new run: "
            f"trainctl train {run.lang} --env {run.env}",
        )
    _check_own_data(run, run_id)
    return changes


def _check_own_data(run: LanguageRun, run_id: str) -> None:
    """The run's copy of its data is whole; a run from before copies, with checkpoints, saw no data push since
    it started (its checkpoints would not resume on other data)."""
    bucket, lang = run.bucket, run.lang
    previous = f"{lang}/data/previous/"
    record = read_json(bucket, run_key(lang, run_id, DATA_RECORD))
    if record is not None:
        damaged = []
        for name, kept in record.get("files", {}).items():
            now = bucket.checksum(run_key(lang, run_id, RUN_DATA + name))
            if now is None or Checksum(kept.get("md5"), kept.get("crc32c")).same_as(now) is False:
                damaged.append(name)
        if damaged:
            raise TrainstackError(
                f"run {run_id} of {run.lang} cannot resume on the data it started with: its own copy of "
                f"{', '.join(damaged)} in {bucket.url(run_key(lang, run_id, RUN_DATA))} is missing or changed",
                hint=f"put those files back (data push keeps the versions it replaced under {bucket.url(previous)}; "
                f"metadata/data.json has their checksums), or start a new run: trainctl train {lang} --env {run.env}",
            )
        return
    started = run_started_at(run_id)
    if started is None or not bucket.exists(run_key(lang, run_id, CHECKPOINT_POINTER)):
        return  # nothing trained yet: the run takes its copy of the data as it starts
    stamp = _stamp(started)
    pushed = [f for f in bucket.folders(previous) if f[:15] >= stamp]
    if pushed:
        raise TrainstackError(
            f"run {run_id} of {lang} started before runs kept their own data, and data push replaced its data "
            f"since (the versions it trained on are kept under {bucket.url(previous + pushed[0])}/): "
            "its checkpoints would not resume on the new data",
            hint=f"put those files back in {bucket.url(f'{lang}/data/')} to resume it, or start a new run: "
            f"trainctl train {lang} --env {run.env}",
        )


def _stamp(epoch_s: float) -> str:
    """A time as data push names its backup folders (YYYYMMDD-HHMMSS, UTC)."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime("%Y%m%d-%H%M%S")


def record_changes(run: LanguageRun, run_id: str, changes: list[tuple[str, object, object]]) -> None:
    """The settings a resume changed, as a change: a line in the run's log and an entry of metadata/changes.json
    (metadata/config.json keeps the settings the run started with)."""
    if not changes:
        return
    bucket, at = run.bucket, now_iso()
    key = run_key(run.lang, run_id, SETTINGS_CHANGES)
    doc = read_json(bucket, key) or {"changes": []}
    doc["changes"].append(
        {"at": at, "by": "trainctl train --resume", "settings": [{"key": k, "from": o, "to": n} for k, o, n in changes]}
    )
    bucket.write_bytes(key, json.dumps(doc, indent=2).encode())
    bucket.append(
        run_key(run.lang, run_id, "log.txt"),
        f"{at.replace('+00:00', 'Z')} settings changed by trainctl (--resume): {said(changes)}\n".encode(),
    )
