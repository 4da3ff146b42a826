"""Benchmark: tokenization into the bucket cache, one worker against all cores.

    .venv/bin/python -m benchmarks.tokenize [--rows 100000] [--workers N]

Writes a synthetic French-like data set (seeded word list, rows of 5-80 words)
to a temporary folder: a train.csv and a gzipped corpus file of as many lines.
Each measurement runs in a fresh process on a fresh file:// bucket:

- labelled texts (`labelled_tokens`) with 1 worker, then with N workers;
- the corpus file (`corpus_tokens`, streamed from .txt.gz) with N workers;
- the second, cached call of each (cache hit time);
- CPU seconds of all processes for the first call (on a shared machine, wall
  time alone says little about how well the cores were used);
- for reference, fastai's per-row Tokenizer (the trainer's old path) on the first rows.

Memory: ru_maxrss of the measuring process (RUSAGE_SELF) and of its largest
finished descendant (RUSAGE_CHILDREN: a tokenizer worker or their forkserver,
stopped first so that it counts). A worker's RSS includes ~0.7 GB of torch and
fastai pages it shares with the forkserver, so the peak PSS of the whole
process tree (sampled from /proc every 0.2 s) is printed too: what it really costs.
The measuring process imports fastai first, as the trainer has.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LANG = "fr"
WORDS = (
    "le la les un une des de du et à en pour avec sur dans par mais ou donc je tu il elle nous vous ils "
    "mon ma mes votre vos notre commande colis livraison facture compte produit client service remboursement "
    "retour adresse paiement carte numéro suivi délai semaine jour hier aujourd'hui demain reçu envoyé "
    "toujours jamais encore déjà très trop bien mal rapide lent cassé abîmé manquant erreur problème question "
    "merci bonjour bonsoir cordialement madame monsieur est sont était avoir être fait pas ne plus rien "
    "écran batterie chargeur câble téléphone ordinateur montre casque taille couleur prix euros"
).split()
SYLLABLES = (
    "ba be bi bo bu ca ce ci co cu da de di do du fa fe fi la le li lo lu ma me mi mo mu na ne ni no "
    "nu pa pe pi po pu ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo vu é è ê ou an on in".split()
)
PUNCT = (",", ",", ".", "!", "?", ":", ";", "...")


def sentence_maker(seed: int):
    """Rows of 5-80 words: common words plus ~20k rarer made-up ones (Zipf-like), some capitals and numbers."""
    rng = random.Random(seed)
    rare = sorted({"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(20_000)})
    vocab = WORDS + rare
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1) ** 1.05 for rank in range(len(vocab))))

    def make() -> str:
        words = rng.choices(vocab, cum_weights=cum_weights, k=rng.randint(5, 80))
        out = []
        for i, word in enumerate(words):
            roll = rng.random()
            if i == 0 or roll < 0.05:
                word = word.capitalize()
            elif roll < 0.06:
                word = word.upper()
            elif roll < 0.08:
                word = str(rng.randint(1, 99999))
            out.append(word)
            if rng.random() < 0.08:
                out.append(rng.choice(PUNCT))
        return " ".join(out) + rng.choice(".!?")

    return make


def make_dataset(folder: Path, rows: int) -> None:
    labels = ["livraison", "facturation", "produit", "compte"]
    make, rng = sentence_maker(1), random.Random(2)
    with open(folder / "train.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "labels"])
        for _ in range(rows):
            writer.writerow([make(), rng.choice(labels)])
    make_corpus = sentence_maker(3)
    with gzip.open(folder / "corpus.txt.gz", "wt", encoding="utf-8") as fh:
        for _ in range(rows):
            fh.write(make_corpus() + "\n")


class TreePss:
    """Samples the summed PSS of this process and all its descendants; keeps the peak (MB)."""

    def __init__(self, interval: float = 0.2):
        self.peak, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def __enter__(self) -> TreePss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak = max(self.peak, sum(_pss_kb(pid) for pid in _tree(os.getpid())) / 1024)


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith("Pss:")), 0)
    except OSError:
        return 0


class KeptLines:
    def __init__(self):
        self.lines: list[str] = []

    def line(self, message: str) -> None:
        self.lines.append(message)


def measure(kind: str, workers: int, data: Path, bucket_dir: Path) -> dict:
    """One measurement, in this (fresh) process: first call, cached call, peak RSS."""
    import multiprocessing.forkserver
    import shutil

    import fastai.text.all  # noqa: F401  (the trainer has it loaded before it tokenizes)

    from trainer.data.labelled import parse_labelled_csv
    from trainer.storage import open_bucket
    from trainer.text.cache import corpus_tokens, labelled_tokens

    bucket, log = open_bucket(f"file://{bucket_dir}"), KeptLines()
    if kind == "labelled":
        texts = parse_labelled_csv(
            (data / "train.csv").read_bytes(), text_col="text", label_col="labels", label_sep=";", source="train.csv"
        ).texts
        run = lambda: labelled_tokens(bucket, LANG, texts, log=log, workers=workers)  # noqa: E731
    else:
        key = f"{LANG}/data/corpus/corpus.txt.gz"
        (bucket_dir / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(data / "corpus.txt.gz", bucket_dir / key)
        run = lambda: corpus_tokens(bucket, LANG, key, log=log, workers=workers)  # noqa: E731
    self_before, children_before = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    with TreePss() as pss:
        started = time.perf_counter()
        table = run()
        first_s = time.perf_counter() - started
    self_cpu = _cpu(resource.RUSAGE_SELF) - self_before
    started = time.perf_counter()
    run()
    cached_s = time.perf_counter() - started
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None):
        server._stop()  # reaped now, so RUSAGE_CHILDREN includes it and the workers it reaped
    cpu_s = self_cpu + _cpu(resource.RUSAGE_CHILDREN) - children_before  # workers only ran in the first call
    self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "kind": kind,
        "workers": workers,
        "texts": len(table),
        "tokens": table.n_tokens,
        "first_s": first_s,
        "cached_s": cached_s,
        "tokens_per_s": table.n_tokens / first_s,
        "self_maxrss_mb": self_rss / 1024,
        "children_maxrss_mb": children_rss / 1024,
        "tree_pss_mb": pss.peak,
        "cpu_s": cpu_s,
        "log": log.lines,
    }


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def baseline(data: Path, rows: int) -> dict:
    """The trainer's old path: fastai's Tokenizer called per row, in one process."""
    from fastai.text.all import Tokenizer, WordTokenizer

    with open(data / "train.csv", newline="", encoding="utf-8") as fh:
        texts = [row["text"] for _, row in zip(range(rows), csv.DictReader(fh))]
    tok = Tokenizer(WordTokenizer(LANG))
    tok(texts[0])  # spaCy's start-up is not the throughput
    started = time.perf_counter()
    n = sum(len(tok(t)) for t in texts)
    return {"rows": len(texts), "tokens": n, "tokens_per_s": n / (time.perf_counter() - started)}


def in_child(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.tokenize", *args], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=None, help="all usable cores if omitted")
    parser.add_argument("--baseline-rows", type=int, default=10_000)
    parser.add_argument("--measure", nargs=4, metavar=("KIND", "WORKERS", "DATA", "BUCKET"), help=argparse.SUPPRESS)
    parser.add_argument("--baseline", nargs=2, metavar=("DATA", "ROWS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, workers, data, bucket = args.measure
        print(json.dumps(measure(kind, int(workers), Path(data), Path(bucket))))
        return
    if args.baseline:
        print(json.dumps(baseline(Path(args.baseline[0]), int(args.baseline[1]))))
        return

    from trainer.text.tokens import default_workers

    workers = args.workers or default_workers()
    with tempfile.TemporaryDirectory(prefix="bench-tokenize-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        started = time.perf_counter()
        make_dataset(data, args.rows)
        print(
            f"data: {args.rows} rows of 5-80 words + a corpus of {args.rows} lines (.txt.gz), "
            f"made in {time.perf_counter() - started:.1f}s; {default_workers()} usable cores"
        )
        base = in_child("--baseline", str(data), str(min(args.baseline_rows, args.rows)))
        print(
            f"old path (fastai Tokenizer per row, 1 process, {base['rows']} rows): {base['tokens_per_s']:,.0f} tokens/s"
        )
        runs = [("labelled", 1), ("labelled", workers), ("corpus", workers)]
        for n, (kind, w) in enumerate(runs):
            r = in_child("--measure", kind, str(w), str(data), str(Path(tmp) / f"bucket{n}"))
            print(
                f"{kind:8s} workers={w}: {r['texts']} texts, {r['tokens']:,} tokens in {r['first_s']:.1f}s "
                f"= {r['tokens_per_s']:,.0f} tokens/s ({r['cpu_s']:.1f} CPU s, start-up included); "
                f"cache hit {r['cached_s']:.2f}s; peak RSS {r['self_maxrss_mb']:.0f} MB (self), "
                f"{r['children_maxrss_mb']:.0f} MB (largest child); "
                f"peak PSS of all processes {r['tree_pss_mb']:.0f} MB"
            )
            print(f"    {r['log'][0]}")


if __name__ == "__main__":  # tokenizer workers re-import this module by name: run nothing then
    main()
