"""Shared fixtures: an isolated project folder, sample data, a real GCS API server."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
# Small enough for a CPU test, big enough to exercise every stage.
TINY = ["defaults.trainer.epochs_base_lm=1", "defaults.trainer.epochs_lm=2", "defaults.trainer.epochs_clf=2",
        "defaults.trainer.min_clf_steps=0",
        "defaults.trainer.emb_sz=32", "defaults.trainer.n_hid=64", "defaults.trainer.n_layers=1"]
TINY_SETS = [arg for s in TINY for arg in ("--set", s)]
TINY_TRAINER_ARGS = ["--epochs-base-lm", "1", "--epochs-lm", "2", "--epochs-clf", "2", "--min-clf-steps", "0",
                     "--emb-sz", "32",
                     "--n-hid", "64", "--n-layers", "1", "--bs", "32", "--min-freq", "1"]


# Real prose (../shared/corpora, see its README) lives beside the project in the workspace, never in it.
SHARED_CORPORA = REPO.parent / "shared" / "corpora"
CORPUS_FILES = {"fr": "fr/fr_eltec_novels.txt.gz", "en": "en/en_eltec_novels.txt.gz",
                "es": "es/es_eltec_novels.txt.gz", "el": "el/el_laws_fek_2021_2024.txt.gz",
                "ja": "ja/ja_aozora_modern_kana.txt.gz"}


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


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A fresh project checkout (envs/, cdktf.json) as the working directory."""
    root = make_project(tmp_path / "proj")
    monkeypatch.chdir(root)
    monkeypatch.delenv("TRAINCTL_ENV", raising=False)
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    """gcp-storage-emulator on 127.0.0.1: a real GCS JSON API server."""
    port = _free_port()
    data = tmp_path_factory.mktemp("gcs")
    exe = Path(sys.executable).parent / "gcp-storage-emulator"
    proc = subprocess.Popen([str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory",
                             "--default-bucket", "test-bucket"], cwd=data,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        raise RuntimeError("gcp-storage-emulator did not start")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def gcs_env(gcs_server, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test-project")
    return gcs_server


@pytest.fixture(autouse=True)
def no_live_billing_catalog(monkeypatch):
    """Costs on gcp read the Cloud Billing Catalog: never the real one from a test (a closed
    local port, so the price book falls back at once); tests of the catalog serve recordings."""
    from stacks.gcp.pricing import ENDPOINT_ENV

    monkeypatch.setenv(ENDPOINT_ENV, "http://127.0.0.1:9")
