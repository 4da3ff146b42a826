"""A run's figures as both of its views name them: TensorBoard's event files (trainer/runtime/board.py,
written while the run trains) and MLflow's mirror (stacks/tracking/record.py, read from the bucket after).
Standard library only: the operator side reads it too.

One scheme, so a figure has the same name at the same step in either view:
- an epoch's figures are `<stage>/<figure>` (`classifier/valid_loss`, `classifier/macro_f1_at_0.5`):
  TensorBoard shows one section per stage, MLflow's charts group by the same prefix;
- the step is the run's global epoch, the record's place in metrics.json's history (1 is the first epoch
  of the first stage, stages in the order they ran), so a stage's curve continues where the last one ended;
- the final figures (`macro_f1`, `f1/<label>`, `tfidf/macro_f1`, a pretrain's `perplexity`) sit at the
  step of the run's last epoch, and so do the figures known once the run has ended (`cost/*`, `spot/*`:
  trainctl writes them to both views, stacks/runs/records.py);
- the settings (MLflow's params, TensorBoard's HParams) are `run_params`: the trainer's arguments with what
  the run recorded of itself (the tokenizer it used, not the `auto` it was asked for; the data's hash, rows
  per split, device, precision);
- names are keys MLflow accepts (letters, digits, _ - . space /): `@` becomes `_at_`.
"""

from __future__ import annotations

import re

_KEY_BAD = re.compile(r"[^\w.\- /]")
RECORD_FIELDS = ("stage", "phase", "epoch")  # what names a history record, not one of its figures
NOT_SETTINGS = ("bucket", "run_id", "work_dir", "env", "lang")  # where and which run, not how it trained


def key_name(text: str) -> str:
    """A metric or param key MLflow accepts (`macro_f1@0.5` -> `macro_f1_at_0.5`; any script's letters
    stay)."""
    return _KEY_BAD.sub("_", text.replace("@", "_at_"))


def finite(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def curve_key(stage: str, figure: str) -> str:
    return key_name(f"{stage}/{figure}")


def epoch_figures(record: dict) -> dict[str, float]:
    """One history record's figures by their keys (a figure the epoch had none of, NaN, left out)."""
    return {
        curve_key(record["stage"], name): number
        for name, value in record.items()
        if name not in RECORD_FIELDS and (number := finite(value)) is not None
    }


def epoch_points(history: list[dict]) -> list[tuple[int, dict, dict[str, float]]]:
    """(global epoch, record, its figures) for each epoch of the history."""
    return [(step, record, epoch_figures(record)) for step, record in enumerate(history, 1)]


def final_figures(doc: dict) -> dict[str, float]:
    """metrics.json's final figures by their keys: the kept model's, each label's F1, the classifier alone,
    the baselines; or a pretrain's perplexity."""
    figures: dict[str, object] = {}
    if doc.get("job") == "pretrain-lm":
        figures["perplexity"] = doc.get("perplexity")
        figures["tokens"] = (doc.get("base_lm") or {}).get("tokens")
    else:
        for name in ("macro_f1", "micro_f1", "accuracy"):
            figures[name] = doc.get(name)
        for label, values in (doc.get("per_label") or {}).items():
            figures[f"f1/{label}"] = (values or {}).get("f1")
        for part, prefix in (
            ("classifier", "classifier"),
            ("baseline_tfidf", "tfidf"),
            ("baseline", "majority"),
            ("probe", "probe"),
        ):
            for name in ("macro_f1", "micro_f1", "accuracy"):
                figures[f"{prefix}/{name}"] = (doc.get(part) or {}).get(name)
        if doc.get("kept") == "blend":  # the classifier's share in the kept blend; none when it was kept alone
            figures["blend_weight"] = (doc.get("blend") or {}).get("weight")
    figures["duration_s"] = doc.get("duration_s")
    return {key_name(k): v for k, value in figures.items() if (v := finite(value)) is not None}


def run_settings(args: dict) -> dict[str, object]:
    """The trainer's arguments that shape the model (MLflow's params, TensorBoard's hyper-parameters)."""
    return {key_name(k): v for k, v in sorted(args.items()) if k not in NOT_SETTINGS}


# What a run recorded of itself that its arguments do not say, by param name: (file, field), metrics.json being
# "doc" and metadata/trainer.json "trainer". Overrides an argument of the same name (`tokenizer`: `auto` asked).
RECORDED_PARAMS = {
    "data_hash": ("trainer", "data_hash"),
    "tokenizer": ("doc", "tokenizer"),
    "n_train": ("doc", "n_train"),
    "n_valid": ("doc", "n_valid"),
    "n_test": ("doc", "n_test"),
    "device": ("trainer", "device"),
    "precision_used": ("trainer", "precision"),
}


def run_params(trainer_meta: dict, doc: dict) -> dict[str, object]:
    """The run's settings as both views show them: its arguments (`run_settings`) and RECORDED_PARAMS;
    values as recorded (MLflow writes them as text, TensorBoard keeps numbers)."""
    params = run_settings(trainer_meta.get("args") or {})
    files = {"doc": doc, "trainer": trainer_meta}
    recorded = {name: files[part].get(field) for name, (part, field) in RECORDED_PARAMS.items()}
    params.update({name: value for name, value in recorded.items() if value is not None})
    return params


def after_run_figures(cost: dict, estimate: dict, moves: dict) -> dict[str, float]:
    """What trainctl knows once the run has ended, by key: what it cost (metadata/cost.json, from its VMs' boot
    records) beside the estimate at apply, and, for a run that was placed, what Spot cost it in time
    (placements_summary)."""
    figures: dict[str, object] = {}
    if moves.get("placements"):
        figures.update(
            {f"spot/{name}": moves.get(name) for name in ("preemptions", "capacity_wait_s", "interrupted_s")}
        )
    figures.update(
        {
            "cost/est_usd": cost.get("est_cost"),
            "cost/billed_vm_s": cost.get("billed_vm_s"),
            "cost/vm_per_hour": cost.get("vm_per_hour"),
            "cost/vm_boots": cost.get("vm_boots"),
            "cost/estimate_per_hour": estimate.get("per_hour"),
        }
    )
    return {key_name(k): v for k, value in figures.items() if (v := finite(value)) is not None}
