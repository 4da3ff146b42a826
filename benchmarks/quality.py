"""Benchmark: model vs the TF-IDF baseline on the same rows, per sample language, with wall times.

    .venv/bin/python -m benchmarks.quality [--langs fr en ja zh el] [--env local] [--bidirectional]

Runs `python -m trainer` with the env's settings on each sample in data/sample/<lang>
(a fresh file:// bucket, so the base LM is pretrained too) and prints, from each run's
metrics.json: which rows were scored, the model's macro-F1, the TF-IDF baseline's on the
same rows, the trainer's wall time and the baseline's fit time. `--bidirectional` trains the
backward models too (trainer.bidirectional) and adds the backward model's and the
forward+backward ensemble's macro-F1.
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
    parser.add_argument("--bidirectional", action="store_true", help="also the backward model and the ensemble")
    args = parser.parse_args()
    from stacks.config import load_config
    from stacks.config.trainer_command import trainer_args

    # Samples beyond the env's languages (ja, zh, el) run with its defaults.
    sets = [f"languages.{lang}={{}}" for lang in args.langs]
    config = load_config(
        REPO / "envs", args.env, sets + (["defaults.trainer.bidirectional=true"] if args.bidirectional else [])
    )
    extra = " backward macro-F1 | ensemble macro-F1 | ensemble − TF-IDF |" if args.bidirectional else ""
    print(
        f"| lang | rows scored | model macro-F1 | TF-IDF macro-F1 | model − TF-IDF | trainer wall | TF-IDF fit |{extra}"
    )
    print("|---|---|---|---|---|---|---|" + "---|" * extra.count("|"))
    for lang in args.langs:
        with tempfile.TemporaryDirectory() as tmp:
            bucket = Path(tmp) / "bucket"
            shutil.copytree(REPO / "data/sample" / lang, bucket / lang / "data")
            targs = [a for a in trainer_args(config, lang)]
            targs[targs.index("--bucket") + 1] = f"file://{bucket}"
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "trainer", *targs, "--run-id", "bench"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wall = time.perf_counter() - start
            m = json.loads((bucket / lang / "runs/bench/metrics.json").read_text())
            t = m["baseline_tfidf"]
            print(
                f"| {lang} ({'sentencepiece' if m['tokenizer'].startswith('sentencepiece') else 'spacy'}) | "
                f"{m['rows']['scores']} ({m['n_test'] or m['n_valid']}) | {m['macro_f1']:.3f} | "
                f"{t['macro_f1']:.3f} | {m['macro_f1'] - t['macro_f1']:+.3f} | {wall:.0f} s | {t['fit_s']:.1f} s |"
                + (
                    f" {m['backward']['macro_f1']:.3f} | {m['ensemble']['macro_f1']:.3f} | "
                    f"{m['ensemble']['macro_f1'] - t['macro_f1']:+.3f} |"
                    if "ensemble" in m
                    else ""
                )
            )


if __name__ == "__main__":
    main()
