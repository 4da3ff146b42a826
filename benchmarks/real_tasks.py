"""Benchmark: the classifier against TF-IDF on real labelled tasks (../shared/datasets), by training size.

    .venv/bin/python -m benchmarks.real_tasks [--tasks fr_sib200 ...] [--sizes 100 300 1000 5000]
        [--seeds 0] [--variants tfidf corpus inline] [--lm-bucket file://DIR] [--test-rows 1000]
        [--env local] [--set k=v ...] [--json-out FILE] [--keep-runs DIR]
    .venv/bin/python -m benchmarks.real_tasks --rescore DIR [--tasks ...] [--json-out FILE]

Each task is a folder of `../shared/datasets/` (train.csv, valid.csv where present, test.csv; `text,labels`,
several labels joined by ';'). One fixed test sample (seeded, stratified by each row's rarest label)
scores every model of a task. For each training size and seed: a seeded stratified sample of the
train split, and validation rows in proportion (a quarter of the training size, so 20 % of what
the trainer sees, as trainer.valid_pct) from the valid split, else from train rows not sampled;
never from test. Variants:
  tfidf    TF-IDF + logistic regression fitted here on the same rows: today's baseline
           (trainer.classification.baseline) and the earlier one (`legacy`), both shown;
  corpus   `python -m trainer` with the env's settings and the base LM that `--lm-bucket`'s
           <lang>/lm/CURRENT names (trainctl lm pretrain on the shared corpus);
  inline   the same with no corpus LM (a base LM pretrained inline on the training rows);
  before   the corpus variant with the earlier recipe (the last epoch, each label's own threshold,
           no blend): the ablation's "before" column.
A model cell reports what the run kept (trainer.classification.blend: the classifier, or its blend
with TF-IDF) and the classifier alone; every F1 comes with a 90 % paired bootstrap interval of
"kept - TF-IDF" over the test rows. Prints Markdown rows as cells finish; --json-out keeps them.
--rescore DIR re-decides what each run kept in DIR (a --keep-runs folder: DIR/<variant>/<task>-<size>-<seed>)
under today's rule (trainer.classification.blend), from the classifier probabilities it saved and the
same TF-IDF refitted: what those runs would keep now, without training them again.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the checkout; TRAINSTACK_SHARED names another (a subset carried to a GPU machine)
DATASETS = Path(os.environ.get("TRAINSTACK_SHARED") or REPO.parent / "shared") / "datasets"
SIB200 = ["fr_sib200", "en_sib200", "es_sib200", "el_sib200", "ja_sib200"]
DEFAULT_TASKS = [*SIB200, "fr_mlma_hate", "fr_xed", "en_goemotions"]
BOOTSTRAP = 1000
# The earlier classifier recipe: the last epoch ships, each label its own threshold, no blend.
BEFORE = [
    "defaults.trainer.best_epoch=false",
    "defaults.trainer.thresholds=per_label",
    "defaults.trainer.blend_tfidf=false",
]


@dataclass(frozen=True)
class Split:
    """Rows of one sample: texts and label lists."""

    texts: list[str]
    labels: list[list[str]]

    def __len__(self) -> int:
        return len(self.texts)


def read_split(task: str, name: str) -> Split | None:
    path = DATASETS / task / f"{name}.csv"
    if not path.exists():
        return None
    with path.open(encoding="utf-8", newline="") as f:
        rows = [(r["text"], [l for l in r["labels"].split(";") if l]) for r in csv.DictReader(f)]
    return Split([t for t, _ in rows], [ls for _, ls in rows])


def stratified_indices(
    labels: list[list[str]], n: int, rng: random.Random, exclude: set[int] = frozenset()
) -> list[int]:
    """n row indices, stratified by each row's rarest label (so every label that can appear does), seeded."""
    counts = Counter(l for ls in labels for l in ls)
    groups: dict[str, list[int]] = {}
    for i, ls in enumerate(labels):
        if i not in exclude:
            key = min(ls, key=lambda l: (counts[l], l)) if ls else ""
            groups.setdefault(key, []).append(i)
    pool = sum(len(g) for g in groups.values())
    if n >= pool:
        picked = [i for g in groups.values() for i in g]
        rng.shuffle(picked)
        return picked
    picked = []
    for key in sorted(groups):
        group = groups[key]
        k = max(1, round(n * len(group) / pool))
        picked += rng.sample(group, min(k, len(group)))
    rng.shuffle(picked)
    if len(picked) > n:
        return picked[:n]
    rest = [i for g in groups.values() for i in g if i not in set(picked)]
    return picked + rng.sample(rest, n - len(picked))


def lang_of(task: str) -> str:
    return task.split("_", 1)[0]


def write_csv(path: Path, split: Split, idx: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["text", "labels"])
    w.writerows((split.texts[i], ";".join(split.labels[i])) for i in idx)
    path.write_text(buf.getvalue(), encoding="utf-8")


@dataclass
class Cell:
    """One (task, size, seed): the rows every variant of it reads."""

    task: str
    size: int
    seed: int
    train: Split
    valid: Split
    test: Split

    @property
    def label_names(self) -> list[str]:
        return sorted({l for ls in [*self.train.labels, *self.valid.labels, *self.test.labels] for l in ls})

    @property
    def multi_label(self) -> bool:
        return any(len(ls) != 1 for ls in [*self.train.labels, *self.valid.labels, *self.test.labels])

    def targets(self, split: Split) -> np.ndarray:
        names = self.label_names
        return np.array([[int(l in ls) for l in names] for ls in split.labels])


def make_cells(task: str, sizes: list[int], seeds: list[int], test_rows: int) -> list[Cell]:
    train, valid, test = (read_split(task, n) for n in ("train", "valid", "test"))
    test_idx = stratified_indices(test.labels, min(test_rows, len(test)), random.Random(0))
    test_sample = Split([test.texts[i] for i in test_idx], [test.labels[i] for i in test_idx])
    cells = []
    for size in sizes:
        n = min(size, len(train) if valid is not None else int(len(train) * 0.8))
        for seed in seeds:
            rng = random.Random(1000 * seed + n)
            tr = stratified_indices(train.labels, n, rng)
            n_valid = max(10, round(n / 4))
            if valid is not None:
                va_src, va = valid, stratified_indices(valid.labels, min(n_valid, len(valid)), rng)
            else:
                va_src, va = train, stratified_indices(train.labels, n_valid, rng, exclude=set(tr))
            cells.append(
                Cell(
                    task,
                    n,
                    seed,
                    Split([train.texts[i] for i in tr], [train.labels[i] for i in tr]),
                    Split([va_src.texts[i] for i in va], [va_src.labels[i] for i in va]),
                    test_sample,
                )
            )
        if n < size:
            break  # the whole train split is already in
    return cells


def tfidf_probs(cell: Cell, spec, policy: str | None = None) -> tuple[np.ndarray, np.ndarray, object]:
    """(validation probs, test probs, the fitted model) of a TF-IDF spec on the cell's rows (thresholds by
    `policy`, default the trainer's)."""
    from trainer.classification import metrics as M
    from trainer.classification.baseline import fit_tfidf

    texts = [*cell.train.texts, *cell.valid.texts, *cell.test.texts]
    targets = np.vstack([cell.targets(cell.train), cell.targets(cell.valid), cell.targets(cell.test)])
    n_tr, n_va = len(cell.train), len(cell.valid)
    model = fit_tfidf(
        texts,
        targets,
        train_idx=list(range(n_tr)),
        valid_idx=list(range(n_tr, n_tr + n_va)),
        multi_label=cell.multi_label,
        labels=cell.label_names,
        spec=spec,
        seed=cell.seed,
        threshold_policy=policy or M.DEFAULT_POLICY,
    )
    return model.probabilities(cell.valid.texts), model.probabilities(cell.test.texts), model


def decide(probs: np.ndarray, cell: Cell, thresholds) -> np.ndarray:
    from trainer.classification import metrics as M

    return M.decide(probs, multi_label=cell.multi_label, thresholds=thresholds)


def f1s(pred: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    """(macro, micro) F1 of boolean predictions."""
    tp = (pred & true).sum(axis=0)
    fp = (pred & ~true).sum(axis=0)
    fn = (~pred & true).sum(axis=0)
    per = np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0)
    micro = 2 * tp.sum() / max(2 * tp.sum() + fp.sum() + fn.sum(), 1)
    return float(per.mean()), float(micro)


def bootstrap_gap(pred_a: np.ndarray, pred_b: np.ndarray, true: np.ndarray, seed: int = 0) -> dict:
    """90 % paired bootstrap intervals of (a - b) macro- and micro-F1 over the rows."""
    rng = np.random.default_rng(seed)
    n = len(true)
    macro, micro = [], []
    for _ in range(BOOTSTRAP):
        i = rng.integers(0, n, n)
        (ma, mia), (mb, mib) = f1s(pred_a[i], true[i]), f1s(pred_b[i], true[i])
        macro.append(ma - mb)
        micro.append(mia - mib)
    q = lambda v: [round(float(np.quantile(v, 0.05)), 3), round(float(np.quantile(v, 0.95)), 3)]  # noqa: E731
    return {"macro": q(macro), "micro": q(micro)}


def read_predictions(path: Path, labels: list[str], prefix: str = "prob_") -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, boolean predictions) of a run's predictions CSV, in its row order."""
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    cols = [f"{prefix}{l}" for l in labels] if f"{prefix}{labels[0]}" in rows[0] else [f"prob_{l}" for l in labels]
    probs = np.array([[float(r[c]) for c in cols] for r in rows])
    pred = np.array([[l in r["pred_labels"].split(";") for l in labels] for r in rows])
    return probs, pred


def run_trainer(cell: Cell, targs: list[str], lm_src: Path | None, keep: Path | None) -> dict:
    """One `python -m trainer` run on the cell's rows in a fresh file:// bucket."""
    lang = lang_of(cell.task)
    with tempfile.TemporaryDirectory() as tmp:
        bucket = Path(tmp) / "bucket"
        for name, split in (("train", cell.train), ("valid", cell.valid), ("test", cell.test)):
            write_csv(bucket / lang / "data" / f"{name}.csv", split, list(range(len(split))))
        if (DATASETS / cell.task / "unlabelled.csv").exists():  # IMDb's 50,000 unlabelled reviews: LM fine-tuning
            shutil.copy(DATASETS / cell.task / "unlabelled.csv", bucket / lang / "data" / "unlabelled.csv")
        if lm_src is not None:
            current = json.loads((lm_src / lang / "lm" / "CURRENT").read_text())["id"]
            shutil.copytree(lm_src / lang / "lm" / current, bucket / lang / "lm" / current)
            shutil.copy(lm_src / lang / "lm" / "CURRENT", bucket / lang / "lm" / "CURRENT")
        args = list(targs)
        args[args.index("--bucket") + 1] = f"file://{bucket}"
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "trainer", *args, "--run-id", "bench"], capture_output=True, text=True
        )
        wall = time.perf_counter() - started
        run = bucket / lang / "runs" / "bench"
        if proc.returncode != 0:
            raise SystemExit(f"trainer failed on {cell.task} {cell.size}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        metrics = json.loads((run / "metrics.json").read_text())
        labels = metrics["labels"]
        kept_probs, kept_pred = read_predictions(run / "test_predictions.csv", labels)
        clf_probs, _ = read_predictions(run / "test_predictions.csv", labels, prefix="model_prob_")
        if keep is not None:
            dest = keep / f"{cell.task}-{cell.size}-{cell.seed}"
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(run, dest)
    return {"metrics": metrics, "wall_s": round(wall, 1), "kept_pred": kept_pred, "clf_probs": clf_probs}


def trainer_argv(lang: str, env: str, sets: list[str], base_lm: str) -> list[str]:
    from stacks.config import load_config
    from stacks.config.trainer_command import trainer_args

    config = load_config(REPO / "envs", env, [f"languages.{lang}={{}}", *sets])
    targs = trainer_args(config, lang)
    targs[targs.index("--base-lm") + 1] = base_lm
    return targs


def fmt(v) -> str:
    return "–" if v is None else f"{v:.3f}"


HEADER = (
    "| task | labels | train / valid / test | seed | TF-IDF before #27 macro (micro) | TF-IDF macro (micro) | "
    "kept macro (micro) | kept − TF-IDF macro [90 %] | micro [90 %] | kept as | classifier alone macro (micro) | "
    "probe macro (micro) | best epoch | trainer wall |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def baseline_columns(cell: Cell) -> tuple[dict, np.ndarray]:
    """The cell's row (both TF-IDFs' test F1) and today's TF-IDF test predictions."""
    from trainer.classification.baseline import TfidfSpec

    true = cell.targets(cell.test).astype(bool)
    _, legacy_test, legacy = tfidf_probs(cell, TfidfSpec.legacy(), policy="per_label")
    _, tfidf_test, tfidf = tfidf_probs(cell, TfidfSpec.for_language(lang_of(cell.task)))
    legacy_pred, tfidf_pred = decide(legacy_test, cell, legacy.thresholds), decide(tfidf_test, cell, tfidf.thresholds)
    row = {
        "task": cell.task,
        "size": cell.size,
        "seed": cell.seed,
        "n_valid": len(cell.valid),
        "n_test": len(cell.test),
        "labels": len(cell.label_names),
        "multi_label": cell.multi_label,
        "tfidf_legacy": f1s(legacy_pred, true),
        "tfidf": f1s(tfidf_pred, true),
        "tfidf_c": tfidf.c,
    }
    return row, tfidf_pred


def model_columns(
    cell: Cell, variant: str, metrics: dict, kept_pred: np.ndarray, tfidf_pred: np.ndarray, wall_s: float | None
) -> dict:
    true = cell.targets(cell.test).astype(bool)
    clf = metrics.get("classifier") or metrics
    kept_as = metrics.get("kept", "classifier")
    if kept_as == "blend":  # w = 0: TF-IDF alone
        w = metrics["blend"]["weight"]
        kept_as = "TF-IDF alone" if w == 0 else f"blend, w {w:.1f}"
    probe = metrics.get("probe")
    return {
        "variant": variant,
        "kept": f1s(kept_pred, true),
        "kept_as": kept_as,
        "classifier": (clf["macro_f1"], clf["micro_f1"]),
        "wall_s": wall_s,
        "classifier_accuracy": clf.get("accuracy"),
        "best_epoch": (metrics.get("best_epoch") or {}).get("epoch"),
        "probe": (probe["macro_f1"], probe["micro_f1"], probe["accuracy"]) if probe else None,
        "trainer_tfidf": (metrics["baseline_tfidf"]["macro_f1"], metrics["baseline_tfidf"]["micro_f1"]),
        "gap": bootstrap_gap(kept_pred, tfidf_pred, true),
    }


def row_line(cell: Cell, r: dict) -> str:
    """A cell's Markdown row (`r`: baseline_columns' row, with model_columns' when a model ran)."""
    variant, kept, gap = r.get("variant"), r.get("kept"), r.get("gap")
    head = (
        f"| {cell.task}{' (' + variant + ')' if variant else ''} | "
        f"{r['labels']}{' multi' if cell.multi_label else ''} | "
        f"{cell.size} / {len(cell.valid)} / {len(cell.test)} | {cell.seed} | "
        f"{fmt(r['tfidf_legacy'][0])} ({fmt(r['tfidf_legacy'][1])}) | {fmt(r['tfidf'][0])} ({fmt(r['tfidf'][1])}) | "
    )
    if not kept:
        return head + "– | – | – | – | – | – | – | – |"
    wall = "–" if r["wall_s"] is None else f"{r['wall_s']:.0f} s"
    return head + (
        f"{fmt(kept[0])} ({fmt(kept[1])}) | {kept[0] - r['tfidf'][0]:+.3f} {gap['macro']} | "
        f"{kept[1] - r['tfidf'][1]:+.3f} {gap['micro']} | {r['kept_as']} | "
        f"{fmt(r['classifier'][0])} ({fmt(r['classifier'][1])}) | "
        f"{fmt(probe[0]) + ' (' + fmt(probe[1]) + ')' if (probe := r.get('probe')) else '–'} | "
        f"{'–' if r.get('best_epoch') is None else r['best_epoch']} | {wall} |"
    )


def rescore(run: Path, cell: Cell, tfidf_pred: np.ndarray) -> dict:
    """What a kept run keeps under today's rule: its saved classifier probabilities (valid and test rows,
    matched to the cell's by row_id: the benchmark wrote each split in the cell's order), the TF-IDF
    refitted as the trainer fits it (its seed and settings), blend.choose. The CSVs hold 4 decimals, so a
    near-tie between weights may fall the other way than in the run; runs that did not blend (the
    `before` variant) or that blended a bidirectional ensemble are reported as they ran."""
    from trainer.classification import blend
    from trainer.classification import metrics as M
    from trainer.classification.baseline import TfidfSpec, fit_tfidf

    m = json.loads((run / "metrics.json").read_text())
    args = json.loads((run / "metadata" / "trainer.json").read_text()).get("args", {})
    labels, multi, allow_empty = m["labels"], m["multi_label"], bool(m.get("allow_empty"))
    if not args.get("blend_tfidf", True) or args.get("bidirectional"):
        return model_columns(
            cell, run.parent.name, m, read_predictions(run / "test_predictions.csv", labels)[1], tfidf_pred, None
        )
    policy = m.get("threshold_policy") or M.DEFAULT_POLICY
    ids, clf = {}, {}
    for name in ("valid", "test"):
        with (run / f"{name}_predictions.csv").open(encoding="utf-8", newline="") as f:
            ids[name] = [int(r["row_id"]) for r in csv.DictReader(f)]
        clf[name] = read_predictions(run / f"{name}_predictions.csv", labels, prefix="model_prob_")[0]
    rows = [*cell.train.texts, *cell.valid.texts]
    targets = np.vstack([cell.targets(cell.train), cell.targets(cell.valid)])
    model = fit_tfidf(
        rows,
        targets,
        train_idx=list(range(len(cell.train))),
        valid_idx=list(range(len(cell.train), len(rows))),
        multi_label=multi,
        labels=labels,
        spec=TfidfSpec.for_language(lang_of(cell.task)),
        seed=args.get("seed", 42),
        allow_empty=allow_empty,
        threshold_policy=policy,
    )
    valid_texts = [cell.valid.texts[i] for i in ids["valid"]]
    choice = blend.choose(
        clf["valid"],
        model.probabilities(valid_texts),
        cell.targets(cell.valid)[ids["valid"]],
        labels,
        multi_label=multi,
        threshold_policy=policy,
    )
    probs = choice.mix(clf["test"], model.probabilities([cell.test.texts[i] for i in ids["test"]]))
    pred = M.decide(probs, multi_label=multi, thresholds=choice.thresholds, allow_empty=allow_empty)
    m = {**m, "kept": choice.kept, "blend": {**m["blend"], "weight": choice.weight}}
    return model_columns(cell, run.parent.name, m, pred[np.argsort(ids["test"])], tfidf_pred, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS)
    parser.add_argument("--sizes", nargs="+", type=int, default=[100, 300, 1000, 5000])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument(
        "--variants", nargs="+", default=["tfidf", "corpus"], choices=["tfidf", "corpus", "inline", "before"]
    )
    parser.add_argument("--lm-bucket", help="file:// bucket whose <lang>/lm/CURRENT is each language's corpus LM")
    parser.add_argument("--test-rows", type=int, default=1000)
    parser.add_argument("--env", default="local")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="config override, key.path=value")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--keep-runs", type=Path, help="copy each run folder here")
    parser.add_argument("--rescore", type=Path, help="a --keep-runs folder: re-decide what its runs keep today")
    args = parser.parse_args()
    if not DATASETS.exists():
        raise SystemExit(f"needs the shared datasets at {DATASETS}")
    lm_root = Path(args.lm_bucket.removeprefix("file://")) if args.lm_bucket else None
    print(HEADER)
    out = []
    if args.rescore:
        for run in sorted(p for p in args.rescore.glob("*/*-*-*") if (p / "metrics.json").exists()):
            task, size, seed = run.name.rsplit("-", 2)
            if args.tasks != DEFAULT_TASKS and task not in args.tasks:
                continue
            [cell] = [c for c in make_cells(task, [int(size)], [int(seed)], args.test_rows) if c.size == int(size)]
            row, tfidf_pred = baseline_columns(cell)
            out.append({**row, **rescore(run, cell, tfidf_pred)})
            print(row_line(cell, out[-1]), flush=True)
            if args.json_out:
                args.json_out.write_text(json.dumps(out, indent=1))
        return
    for task in args.tasks:
        for cell in make_cells(task, args.sizes, args.seeds, args.test_rows):
            lang = lang_of(task)
            row, tfidf_pred = baseline_columns(cell)
            variants = [v for v in args.variants if v != "tfidf"]
            for variant in variants or [None]:
                cellrow = dict(row)
                if variant is not None:
                    src = None if variant == "inline" else lm_root
                    if src is not None and not (src / lang / "lm" / "CURRENT").exists():
                        print(f"# {task}: no corpus LM for {lang} in {args.lm_bucket}; {variant} skipped", flush=True)
                        continue
                    sets = [*args.sets, *(BEFORE if variant == "before" else [])]
                    r = run_trainer(
                        cell,
                        trainer_argv(lang, args.env, sets, "pretrain-inline" if variant == "inline" else "current"),
                        src,
                        args.keep_runs and args.keep_runs / variant,
                    )
                    cellrow.update(model_columns(cell, variant, r["metrics"], r["kept_pred"], tfidf_pred, r["wall_s"]))
                out.append(cellrow)
                print(row_line(cell, cellrow), flush=True)
                if args.json_out:
                    args.json_out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
