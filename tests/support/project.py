"""The repository, its sample data, tiny trainer settings and the shared real corpora."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample"
# Small enough for a CPU test, big enough to exercise every stage.
TINY = [
    "defaults.trainer.epochs_base_lm=1",
    "defaults.trainer.epochs_lm=2",
    "defaults.trainer.epochs_clf=2",
    "defaults.trainer.min_clf_steps=0",
    "defaults.trainer.emb_sz=32",
    "defaults.trainer.n_hid=64",
    "defaults.trainer.n_layers=1",
    # exact and alike on every CPU (auto is bf16 autocast where the CPU has it)
    "defaults.trainer.precision=fp32",
]
TINY_SETS = [arg for s in TINY for arg in ("--set", s)]
TINY_TRAINER_ARGS = [
    "--epochs-base-lm",
    "1",
    "--epochs-lm",
    "2",
    "--epochs-clf",
    "2",
    "--min-clf-steps",
    "0",
    "--emb-sz",
    "32",
    "--n-hid",
    "64",
    "--n-layers",
    "1",
    "--bs",
    "32",
    "--min-freq",
    "1",
    "--precision",
    "fp32",
]


# Real prose (../shared/corpora, see its README) lives beside the project in the workspace, never in it.
SHARED_CORPORA = REPO.parent / "shared" / "corpora"
CORPUS_FILES = {
    "fr": "fr/fr_eltec_novels.txt.gz",
    "en": "en/en_eltec_novels.txt.gz",
    "es": "es/es_eltec_novels.txt.gz",
    "el": "el/el_laws_fek_2021_2024.txt.gz",
    "ja": "ja/ja_aozora_modern_kana.txt.gz",
}


def shared_corpus(lang: str) -> Path:
    """The shared real corpus of `lang`; skips the test where the workspace has none (a user's clone)."""
    path = SHARED_CORPORA / CORPUS_FILES[lang]
    if not path.exists():
        pytest.skip(f"needs the real {lang} corpus at {path} (the workspace's shared/ folder; a clone has none)")
    return path


def corpus_lines(lang: str, n: int, *, min_chars: int = 1) -> list[str]:
    """The first `n` non-empty lines of at least `min_chars` characters of the shared `lang` corpus."""
    import gzip

    out = []
    with gzip.open(shared_corpus(lang), "rt", encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if len(line) >= min_chars:
                out.append(line)
                if len(out) == n:
                    break
    return out


def make_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "envs", root / "envs")
    shutil.copy(REPO / "cdktf.json", root / "cdktf.json")
    return root
