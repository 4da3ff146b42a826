"""Benchmark: model vs the TF-IDF baseline on the same rows, per sample language, with wall times.

    .venv/bin/python -m benchmarks.quality [--langs fr en ja zh el] [--env local]

Runs `python -m trainer` with the env's settings on each sample in data/sample/<lang>
(a fresh file:// bucket, so the base LM is pretrained too) and prints, from each run's
metrics.json: which rows were scored, the model's macro-F1, the TF-IDF baseline's on the
same rows, the trainer's wall time and the baseline's fit time.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--langs", nargs="+", default=["fr", "en", "ja", "zh", "el"])
    parser.add_argument("--env", default="local")
    args = parser.parse_args()
    from stacks.config import load_config
    from stacks.train_stack import trainer_args

    # Samples beyond the env's languages (ja, zh, el) run with its defaults.
    config = load_config(REPO / "envs", args.env, [f"languages.{lang}={{}}" for lang in args.langs])
    print("| lang | rows scored | model macro-F1 | TF-IDF macro-F1 | model − TF-IDF | trainer wall | TF-IDF fit |")
    print("|---|---|---|---|---|---|---|")
    for lang in args.langs:
        with tempfile.TemporaryDirectory() as tmp:
            bucket = Path(tmp) / "bucket"
            shutil.copytree(REPO / "data/sample" / lang, bucket / lang / "data")
            targs = [a for a in trainer_args(config, lang)]
            targs[targs.index("--bucket") + 1] = f"file://{bucket}"
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "trainer", *targs, "--run-id", "bench"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.perf_counter() - start
            m = json.loads((bucket / lang / "runs/bench/metrics.json").read_text())
            t = m["baseline_tfidf"]
            print(f"| {lang} ({'sentencepiece' if m['tokenizer'].startswith('sentencepiece') else 'spacy'}) | {m['rows']['scores']} ({m['n_test'] or m['n_valid']}) | {m['macro_f1']:.3f} | "
                  f"{t['macro_f1']:.3f} | {m['macro_f1'] - t['macro_f1']:+.3f} | {wall:.0f} s | {t['fit_s']:.1f} s |")


if __name__ == "__main__":
    main()
