"""Benchmark: does a corpus base LM pay? A learning curve on real text, TF-IDF vs inline LM vs corpus LM.

    .venv/bin/python -m benchmarks.transfer --lang fr --lm-bucket file://PROJECT/.trainstack/local/bucket
        [--sizes 50 100 200 1000] [--test-rows 600] [--env local] [--out DIR]

The labelled rows are real paragraphs of the shared corpus (`../shared/corpora/`, see its README)
with a label the text itself carries, the marks that give it away removed:
  fr, es, en, ja  dialogue or narration: the paragraph opened with a dialogue mark (— « " 「 ...);
                  every quotation mark and dialogue dash is removed from the text;
  el              a provision that introduces what follows (it ended with ':') or one that states;
                  the final punctuation is removed.
The rows come only from the corpus lines a `trainctl lm pretrain` of that corpus holds out for
perplexity (2 %, drawn by the same seed): the corpus LM has never read a labelled row. One fixed
test set scores every model; each training size is a seeded stratified sample of the other rows
(the trainer holds out 20 % of them for its thresholds and keeps the test rows unseen).

Variants, each a fresh file:// bucket and `python -m trainer` with the env's settings:
  tfidf   the TF-IDF + logistic regression baseline every run fits on the same rows;
  inline  no corpus LM: a base LM pretrained inline on the training rows (trainer.base_lm pretrain-inline);
  corpus  the base LM that `--lm-bucket`'s <lang>/lm/CURRENT names (trainctl lm pretrain).
Prints a Markdown table (macro- and micro-F1 on the test rows) and writes learning_curve_<lang>.png.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO.parent / "shared" / "corpora"
CORPUS = {
    "fr": "fr/fr_eltec_novels.txt.gz",
    "en": "en/en_eltec_novels.txt.gz",
    "es": "es/es_eltec_novels.txt.gz",
    "el": "el/el_laws_fek_2021_2024.txt.gz",
    "ja": "ja/ja_aozora_modern_kana.txt.gz",
}
DIALOGUE_OPENERS = {"fr": '—–«"“', "es": '—–-«"“', "en": "\"“'‘", "ja": "「『"}
QUOTES = {
    "fr": '[—–«»"“”]',
    "es": '[—–«»"“”]|(?:^|(?<=\\s))-|-(?=\\s|$)',
    "ja": "[「」『』]",
    "en": "[\"“”]|(?<!\\w)['‘’]|['‘’](?!\\w)",
}
MIN_CHARS = 12


def label_row(lang: str, line: str) -> tuple[str, str] | None:
    """(text, label) of a corpus paragraph, the giveaway marks removed; None when it is too short."""
    if lang == "el":
        label = "introduces" if line.endswith(":") else "states"
        text = line.rstrip(":.;,· ")
    else:
        label = "dialogue" if line[0] in DIALOGUE_OPENERS[lang] else "narration"
        text = re.sub(r"\s+", " ", re.sub(QUOTES[lang], " ", line)).strip()
    return (text, label) if len(text) >= MIN_CHARS else None


def held_out_lines(path: Path, seed: int) -> list[str]:
    """The corpus lines `trainctl lm pretrain` holds out for perplexity (trainer.jobs.pretrain_lm, one file)."""
    from trainer.jobs.pretrain_lm import VALID_PCT
    from trainer.text.cache import corpus_lines
    from trainer.text.loaders import split_documents

    with gzip.open(path, "rb") as raw:
        lines = list(corpus_lines(raw, "x.txt"))
    _, valid = split_documents(len(lines), VALID_PCT, seed)
    return [lines[i] for i in sorted(valid)]


def stratified(rows: list[tuple[str, str]], n: int, rng: random.Random) -> list[tuple[str, str]]:
    """n rows with the labels in their proportions (at least 2 of each), in a seeded order."""
    by_label: dict[str, list] = {}
    for row in rows:
        by_label.setdefault(row[1], []).append(row)
    picked = []
    for _label, group in sorted(by_label.items()):
        k = max(2, round(n * len(group) / len(rows)))
        picked += rng.sample(group, min(k, len(group)))
    rng.shuffle(picked)
    return picked[:n] if len(picked) > n else picked


def write_csv(bucket: Path, key: str, rows) -> None:
    path = bucket / key
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["text", "labels"])
    writer.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")


def copy_current_lm(src_bucket: Path, dst_bucket: Path, lang: str) -> str:
    current = json.loads((src_bucket / lang / "lm" / "CURRENT").read_text())["id"]
    shutil.copytree(src_bucket / lang / "lm" / current, dst_bucket / lang / "lm" / current)
    shutil.copy(src_bucket / lang / "lm" / "CURRENT", dst_bucket / lang / "lm" / "CURRENT")
    return current


def run_trainer(targs: list[str], bucket: Path, lang: str) -> tuple[dict, float]:
    args = list(targs)
    args[args.index("--bucket") + 1] = f"file://{bucket}"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trainer", *args, "--run-id", "bench"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"trainer failed ({bucket}):\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    return json.loads((bucket / lang / "runs/bench/metrics.json").read_text()), time.perf_counter() - started


def plot(lang: str, results: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for variant, style in (("tfidf", "s--"), ("inline", "o-"), ("corpus", "^-")):
        points = [(r["rows"], r[variant]) for r in results if r.get(variant) is not None]
        if points:
            ax.plot(
                *zip(*points),
                style,
                label={
                    "tfidf": "TF-IDF + logistic regression",
                    "inline": "ULMFiT, inline LM",
                    "corpus": "ULMFiT, corpus base LM",
                }[variant],
            )
    ax.set_xscale("log")
    ax.set_xlabel("labelled training rows")
    ax.set_ylabel("macro-F1 on the test rows")
    ax.set_title(f"{lang}: learning curve")
    ax.legend()
    ax.grid(alpha=0.3)
    path = out / f"learning_curve_{lang}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lang", required=True, choices=sorted(CORPUS))
    parser.add_argument(
        "--lm-bucket", help="file:// bucket whose <lang>/lm/CURRENT is the corpus LM (none: no corpus column)"
    )
    parser.add_argument("--sizes", nargs="+", type=int, default=[50, 100, 200, 1000])
    parser.add_argument("--test-rows", type=int, default=600)
    parser.add_argument("--env", default="local")
    parser.add_argument("--seed", type=int, default=42, help="the pretrain's trainer.seed (which lines it held out)")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--set", dest="sets", action="append", default=[], help="config override, key.path=value")
    args = parser.parse_args()
    from stacks.config import load_config
    from stacks.constructs.train_stack import trainer_args

    path = CORPORA / CORPUS[args.lang]
    if not path.exists():
        raise SystemExit(f"needs the shared corpus at {path}")
    rows = [r for r in (label_row(args.lang, line) for line in held_out_lines(path, args.seed)) if r]
    rng = random.Random(0)
    test = stratified(rows, args.test_rows, rng)
    chosen = set(map(id, test))
    pool = [r for r in rows if id(r) not in chosen]
    counts = {lbl: sum(1 for _, l in rows if l == lbl) for lbl in sorted({l for _, l in rows})}
    print(
        f"# {args.lang}: {len(rows)} labelled paragraphs from the held-out lines of {path.name} {counts}; "
        f"{len(test)} test rows, training pool {len(pool)}"
    )
    config = load_config(REPO / "envs", args.env, [f"languages.{args.lang}={{}}", *args.sets])
    inline_args = trainer_args(config, args.lang)
    inline_args[inline_args.index("--base-lm") + 1] = "pretrain-inline"
    corpus_args = list(inline_args)
    corpus_args[corpus_args.index("--base-lm") + 1] = "current"
    src = Path(args.lm_bucket.removeprefix("file://")) if args.lm_bucket else None
    print(
        "| training rows | TF-IDF macro-F1 | inline LM macro-F1 | corpus LM macro-F1 | corpus − TF-IDF | "
        "TF-IDF micro-F1 | inline micro-F1 | corpus micro-F1 | trainer wall (inline / corpus) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    results, lm_id = [], None
    for size in args.sizes:
        train = stratified(pool, min(size, len(pool)), random.Random(size))
        result = {"rows": len(train)}
        walls = []
        for variant, targs in (("inline", inline_args), ("corpus", corpus_args)):
            if variant == "corpus" and src is None:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                bucket = Path(tmp) / "bucket"
                write_csv(bucket, f"{args.lang}/data/train.csv", train)
                write_csv(bucket, f"{args.lang}/data/test.csv", test)
                if variant == "corpus":
                    lm_id = copy_current_lm(src, bucket, args.lang)
                m, wall = run_trainer(targs, bucket, args.lang)
            assert m["rows"]["scores"] == "test" and m["n_test"] == len(test)
            result[variant], result[variant + "_micro"] = m["macro_f1"], m["micro_f1"]
            result["tfidf"], result["tfidf_micro"] = m["baseline_tfidf"]["macro_f1"], m["baseline_tfidf"]["micro_f1"]
            walls.append(f"{wall:.0f} s")
        results.append(result)
        fmt = lambda v: f"{v:.3f}" if v is not None else "–"  # noqa: E731
        gap = f"{result['corpus'] - result['tfidf']:+.3f}" if "corpus" in result else "–"
        print(
            f"| {result['rows']} | {fmt(result['tfidf'])} | {fmt(result.get('inline'))} | "
            f"{fmt(result.get('corpus'))} | "
            f"{gap} | {fmt(result['tfidf_micro'])} | {fmt(result.get('inline_micro'))} | "
            f"{fmt(result.get('corpus_micro'))} | {' / '.join(walls)} |",
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# corpus LM: {lm_id or 'none'}; plot: {plot(args.lang, results, args.out)}")


if __name__ == "__main__":
    main()
