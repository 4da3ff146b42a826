"""What the GPU call needs on a device machine that has Python 3.12 and torch but nothing else of ours, packed
to travel with the working tree (64 MiB a call, the checkout's own files included).

    python -m benchmarks.gpu_pack --into .gpudata [--wheels .whl] [--unlabelled-rows 25000]

- `site.tar.xz`: the wheels in WHEELS (fastai, spaCy, pydantic and what they need that the machine lacks, for
  CPython 3.12; downloaded into the --wheels folder when it has none) installed into one folder for that
  Python, extension modules stripped, tests left out;
- `shared.tar.xz`: a subset of ../shared in its layout (`datasets/en_imdb`, `corpora/en`): IMDb's training
  split whole (so the benchmark's seeded sample of 100 is the same rows as on the dev VM), exactly the 2,000
  test reviews benchmarks.real_tasks scores, the first N unlabelled reviews, the whole English corpus.

On the device: `tar -xJf .gpudata/site.tar.xz -C /tmp/site && tar -xJf .gpudata/shared.tar.xz -C /tmp/shared`,
then `PYTHONPATH=/tmp/site TRAINSTACK_SHARED=/tmp/shared python3 -m benchmarks.gpu_call --out "$OUT"`.
`subset()` alone (tiny sizes, no tarballs) is what the suite's dry run of the call reads.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from benchmarks import real_tasks

# What the device machine's image lacks of the trainer's needs (its package list: the device tool's KINDS.md),
# at the versions the dev VM's .venv runs: fastai and spaCy with everything they import.
WHEELS = (
    "annotated-types==0.8.0 beartype==0.23.1 beautifulsoup4==4.15.0 blis==1.3.4 catalogue==2.0.10 "
    "cloudpathlib==0.26.0 confection==1.3.4 cymem==2.0.16 fastai==2.8.12 fastcore==2.2.41 fastdownload==0.0.8 "
    "fastprogress==1.1.6 fasttransform==0.0.5 httpcore2==2.16.2 httpx2==2.16.2 itsdangerous==2.2.0 "
    "murmurhash==1.0.16 oauthlib==4.0.1 plum-dispatch==2.9.0 preshed==3.0.15 pydantic==2.14.4 "
    "pydantic-core==2.50.5 python-fasthtml==0.14.14 python-multipart==0.0.34 smart-open==9.0.2 soupsieve==4.1.3 "
    "spacy==3.8.18 spacy-legacy==3.0.12 spacy-loggers==1.0.5 srsly==2.5.6 starlette==1.10.0 thinc==8.3.14 "
    "truststore==0.10.5 typing-inspection==0.4.5 uvicorn==0.54.0 wasabi==1.1.3 weasel==1.0.1"
).split()
PY312 = [
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--only-binary=:all:",
    *(
        arg
        for tag in (
            "manylinux_2_28_x86_64",
            "manylinux_2_27_x86_64",
            "manylinux_2_24_x86_64",
            "manylinux_2_17_x86_64",
            "manylinux2014_x86_64",
        )
        for arg in ("--platform", tag)
    ),
]


def subset(
    dest: Path,
    *,
    test_rows: int = 2000,
    train_rows: int | None = None,
    unlabelled_rows: int = 25000,
    corpus_bytes: int | None = None,
) -> Path:
    """../shared's IMDb and English corpus, cut down, in ../shared's layout under `dest`."""
    task = dest / "datasets" / "en_imdb"
    task.mkdir(parents=True, exist_ok=True)
    test = real_tasks.read_split("en_imdb", "test")
    if test is None:
        raise SystemExit(f"no IMDb in {real_tasks.DATASETS}: the workspace's shared/ folder is needed")
    picked = real_tasks.stratified_indices(test.labels, min(test_rows, len(test)), random.Random(0))
    real_tasks.write_csv(task / "test.csv", test, sorted(picked))
    train = real_tasks.read_split("en_imdb", "train")
    kept = (
        range(len(train))
        if train_rows is None
        else sorted(real_tasks.stratified_indices(train.labels, train_rows, random.Random(0)))
    )
    real_tasks.write_csv(task / "train.csv", train, list(kept))
    with (real_tasks.DATASETS / "en_imdb" / "unlabelled.csv").open(encoding="utf-8", newline="") as f:
        rows = [row["text"] for _, row in zip(range(unlabelled_rows), csv.DictReader(f))]
    with (task / "unlabelled.csv").open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text"])
        writer.writerows([text] for text in rows)
    corpora = real_tasks.DATASETS.parent / "corpora" / "en"
    (dest / "corpora" / "en").mkdir(parents=True, exist_ok=True)
    for source in sorted(corpora.glob("*.txt.gz")):
        with gzip.open(source, "rt", encoding="utf-8") as f:
            text = f.read() if corpus_bytes is None else f.read(corpus_bytes).rsplit("\n", 1)[0] + "\n"
        (dest / "corpora" / "en" / source.name.removesuffix(".gz")).write_text(text, encoding="utf-8")
    return dest


def site(wheels: Path, dest: Path) -> Path:
    """The wheels installed for CPython 3.12 into `dest`, extension modules stripped."""
    if not any(wheels.glob("*.whl")):  # fetched from PyPI once; the device machine reaches nothing
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PY312, "-d", str(wheels), *WHEELS], check=True
        )
    files = sorted(str(w) for w in wheels.glob("*.whl"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            *PY312,
            "--target",
            str(dest),
            *files,
        ],
        check=True,
    )
    for tests in [p for p in dest.rglob("tests") if p.is_dir()]:
        shutil.rmtree(tests, ignore_errors=True)
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-unneeded", *map(str, dest.rglob("*.so"))], check=True)
    return dest


def tar_xz(folder: Path, to: Path) -> Path:
    with tarfile.open(to, "w:xz", preset=6) as tar:
        for path in sorted(folder.iterdir()):
            tar.add(path, arcname=path.name)
    return to


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--into", type=Path, required=True, help="a folder .git/info/exclude ignores (.gpudata)")
    parser.add_argument("--wheels", type=Path, default=Path(".whl"))
    parser.add_argument("--unlabelled-rows", type=int, default=25000)
    args = parser.parse_args(argv)
    args.into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tar_xz(site(args.wheels, Path(tmp) / "site"), args.into / "site.tar.xz")
        tar_xz(subset(Path(tmp) / "shared", unlabelled_rows=args.unlabelled_rows), args.into / "shared.tar.xz")
    for f in sorted(args.into.iterdir()):
        print(f"{f}: {f.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
