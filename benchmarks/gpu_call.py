"""One prepared call on a GPU machine: what the trainer's CUDA path does, in at most ~8 minutes.

    python -m benchmarks.gpu_call --out "$OUT" [--budget-s 480] [--dry-run]

Steps, each under its own share of the budget, the results written to OUT/gpu_call.json after every step
(a killed call still leaves what it had):
  env     GPU, driver, CUDA and torch versions (nvidia-smi, torch);
  e2e     `trainctl train fr --env local` on the French sample (real Terraform, the trainer on the GPU,
          precision auto = bf16 where the card has it): state, per-epoch lines, GPU utilisation and memory
          (nvidia-smi every second), metrics.json and log.txt copied to OUT/e2e/;
  speed   LM step tokens/s at the GPU envs' model size (envs/base.yaml: 400/1152/3), fp32 against bf16 and
          fp16, full against adaptive softmax (benchmarks.lm_speed on the device);
  loop    the trainer's loop against the bare step (benchmarks.loop_overhead on the device: LM fine-tuning and
          the classifier at the GPU envs' size, bs 64 and 256: ms per batch, loop/bare, host syncs per batch, torch's
          own sync count); with --before DIR (an older checkout's trainer, stacks, envs and benchmarks) the LM
          stage again on that code, for the before/after figures;
  imdb    en_imdb with 100 labels: a base LM on the shared English corpus (`trainctl lm pretrain en`, tokens
          sized to the time left), then benchmarks.real_tasks' corpus variant and TF-IDF on the same 2,000
          test reviews (OUT/imdb/).
`--dry-run` (CPU, the suite runs it): the same steps at tiny sizes; the imdb step runs TF-IDF only (the
corpus variant's pretrain is what the GPU call is for), or says why it is skipped where ../shared is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.lifecycle import fresh_project

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.prefix) / "bin"
SHARED = Path(os.environ.get("TRAINSTACK_SHARED") or REPO.parent / "shared")  # a carried subset on a GPU machine
TINY = [
    "defaults.trainer.epochs_base_lm=1",
    "defaults.trainer.epochs_lm=1",
    "defaults.trainer.epochs_clf=2",
    "defaults.trainer.min_clf_steps=0",
    "defaults.trainer.emb_sz=32",
    "defaults.trainer.n_hid=64",
    "defaults.trainer.n_layers=1",
]
STEPS = ("env", "speed", "e2e", "imdb", "recipe", "loop")
GPU_SIZE = [
    "defaults.trainer.emb_sz=400",
    "defaults.trainer.n_hid=1152",
    "defaults.trainer.n_layers=3",
    "defaults.trainer.bs=64",
]
# the speed step's vocabulary; base.yaml's base-LM rate (the local env's 2e-2 leaves this size at the unigram)
GPU_LM = [*GPU_SIZE, "defaults.trainer.max_vocab=30000", "defaults.trainer.lr_base_lm=0.005"]


def sets(pairs: list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


class Call:
    """The record of the call, saved after every step; each step's time guard from what is left."""

    def __init__(self, out: Path, budget_s: float, dry_run: bool):
        self.out, self.dry_run = out, dry_run
        self.deadline = time.monotonic() + budget_s
        self.record = {
            "dry_run": dry_run,
            "host": platform.node(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budget_s": budget_s,
            "steps": {},
        }
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        (self.out / "gpu_call.json").write_text(json.dumps(self.record, indent=2, default=str))

    def step(self, name: str, func, share: float) -> None:
        """Run `func(limit_s)` with `share` of the time left; its dict (or its error) is the step's record."""
        limit = max(self.left() * share, 0.0)
        started = time.monotonic()
        if limit < 5:
            result = {"skipped": f"no time left ({self.left():.0f}s)"}
        else:
            try:
                result = func(limit)
            except subprocess.TimeoutExpired as exc:
                result = {"error": f"timed out after {exc.timeout:.0f}s"}
            except Exception as exc:  # the call must write what it has, whatever a step does
                result = {"error": f"{type(exc).__name__}: {exc}"}
        result["seconds"] = round(time.monotonic() - started, 1)
        self.record["steps"][name] = result
        self.save()
        print(f"gpu_call: {name}: {json.dumps(result, default=str)[:400]}", flush=True)


def env_step(limit: float) -> dict:
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info.update(
            device=torch.cuda.get_device_name(0),
            bf16=torch.cuda.is_bf16_supported(),
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
        )
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=min(limit, 30),
        )
        info["nvidia_smi"] = out.stdout.strip() or out.stderr.strip()
    return info


class GpuWatch:
    """nvidia-smi every second while a step runs: the highest utilisation and memory seen."""

    def __init__(self):
        self.util, self.mem_mib, self.stop = 0, 0, threading.Event()
        self.smi = shutil.which("nvidia-smi")

    def __enter__(self):
        if self.smi:
            threading.Thread(target=self._poll, daemon=True).start()
        return self

    def _poll(self) -> None:
        while not self.stop.wait(1.0):
            out = subprocess.run(
                [self.smi, "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
            )
            try:
                util, mem = (int(v) for v in out.stdout.splitlines()[0].split(","))
            except (ValueError, IndexError):
                continue
            self.util, self.mem_mib = max(self.util, util), max(self.mem_mib, mem)

    def __exit__(self, *exc):
        self.stop.set()


def bounded(cmd: list[str], *, timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run that ends a command at its time guard and returns what it printed (rc 124), so a step
    that runs out of time still records how far it got."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        said = [v.decode(errors="replace") if isinstance(v, bytes) else (v or "") for v in (exc.stdout, exc.stderr)]
        return subprocess.CompletedProcess(cmd, 124, said[0], said[1] + f"\ntimed out after {timeout:.0f}s")


def trainer_env() -> dict[str, str]:
    """`python -m trainer` from a temporary project: this checkout's packages first on its path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def imdb_cell(root: Path, json_out: Path, *, variant: str, pairs: list[str], dry_run: bool, timeout: float) -> dict:
    """One benchmarks.real_tasks cell of IMDb with 100 labels, base LMs from the project's bucket: its table row
    and cells, or why it failed."""
    r = bounded(
        [
            sys.executable,
            "-m",
            "benchmarks.real_tasks",
            "--tasks",
            "en_imdb",
            "--sizes",
            "100",
            "--variants",
            variant,
            "--test-rows",
            "200" if dry_run else "2000",
            "--lm-bucket",
            f"file://{root / '.trainstack/local/bucket'}",
            "--json-out",
            str(json_out),
            *sets(pairs),
        ],
        cwd=REPO,
        timeout=max(timeout, 5),
    )
    result = {"rc": r.returncode, "table": [line for line in r.stdout.splitlines() if line.startswith("|")][-1:]}
    if json_out.exists():
        result["cells"] = json.loads(json_out.read_text())
    if r.returncode:
        result["stderr"] = r.stderr[-1500:]
    return result


def trainctl(root: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return bounded([str(BIN / "trainctl"), *args], cwd=root, timeout=timeout)


def trainer_only_run(root: Path, pairs: list[str], timeout: float) -> subprocess.CompletedProcess:
    """The trainer alone on the sample (where Terraform or trainctl's CDK packages are not there, as on the
    device machine): the same bucket layout `data push` makes, `python -m trainer` with the local env's
    settings, the same run folder."""
    from stacks.config import load_config
    from stacks.config.trainer_command import trainer_args

    bucket = root / ".trainstack/local/bucket"
    shutil.copytree(REPO / "data/sample/fr", bucket / "fr" / "data")
    config = load_config(root / "envs", "local", pairs)
    run_id = time.strftime("%Y%m%d-%H%M%S-", time.gmtime()) + "0gpu"
    return bounded(
        [sys.executable, "-m", "trainer", *trainer_args(config, "fr"), "--run-id", run_id],
        cwd=root,
        timeout=timeout,
        env=trainer_env(),
    )


def e2e_step(base: Path, out: Path, dry_run: bool, trainer_only: bool):
    def attempt(name: str, pairs: list[str], limit: float) -> dict:
        root = fresh_project(base, name)
        with GpuWatch() as gpu:
            if trainer_only:
                r = trainer_only_run(root, pairs, max(limit - 5, 5))
            else:
                pushed = trainctl(root, "data", "push", "fr", str(REPO / "data/sample/fr"), timeout=min(limit, 120))
                if pushed.returncode:
                    return {"error": f"data push: {pushed.stderr[-500:]}"}
                r = trainctl(root, "train", "fr", *sets(pairs), timeout=max(limit - 5, 5))
        runs = root / ".trainstack/local/bucket/fr/runs"
        folder = next(iter(sorted(runs.iterdir())), None) if runs.exists() else None
        result = {
            "rc": r.returncode,
            "how": "python -m trainer" if trainer_only else "trainctl train",
            "gpu_util_max_pct": gpu.util,
            "gpu_mem_max_mib": gpu.mem_mib,
        }
        if folder is not None:
            (out / name).mkdir(exist_ok=True)
            for file in ("metrics.json", "log.txt"):  # the state is in the record: 8 files at most come back
                if (folder / file).exists():
                    shutil.copy(folder / file, out / name / file)
            status = json.loads((folder / "status.json").read_text()) if (folder / "status.json").exists() else {}
            log = (folder / "log.txt").read_text() if (folder / "log.txt").exists() else ""
            result.update(
                state=status.get("state"),
                error=status.get("error"),
                precision=[line.split("Z ", 1)[-1] for line in log.splitlines() if "precision:" in line][:1],
                epochs=[line.split("Z ", 1)[-1][:160] for line in log.splitlines() if "] epoch " in line],
            )
        if r.returncode:
            result["stderr"] = r.stderr[-800:]
        return result

    def run(limit: float) -> dict:
        started = time.monotonic()
        result = attempt("e2e", TINY if dry_run else [], limit * (1 if dry_run else 0.85))
        left = limit - (time.monotonic() - started)
        if result.get("rc") and not dry_run and left > 30:  # tells a failure of the low-precision path from others
            result["fp32_retry"] = attempt("e2e-fp32", ["defaults.trainer.precision=fp32"], left)
        return result

    return run


def speed_step(dry_run: bool):
    def run(limit: float) -> dict:
        import torch

        from benchmarks.lm_speed import tokens_per_s

        device = "cuda" if torch.cuda.is_available() else "cpu"
        arch, vocab, bs, batches = ((32, 64, 1), 2000, 8, 3) if dry_run else ((400, 1152, 3), 30000, 64, 20)
        precisions = ["fp32", "bf16"] + (["fp16"] if device == "cuda" else [])
        # the GPU envs' bs, then a 4x larger batch in bf16: how much of the card a bs-64 step leaves idle
        configs = [(head, precision, bs) for head in ("full", "adaptive") for precision in precisions]
        configs += [(head, "bf16", bs * 4) for head in ("full", "adaptive")]
        rows, started = [], time.monotonic()
        for head, precision, batch in configs:
            row = {"head": head, "precision": precision, "bs": batch}
            if time.monotonic() - started > limit * 0.9:
                rows.append({**row, "skipped": "out of time"})
                continue
            try:
                rate = tokens_per_s(
                    *arch, vocab, bs=batch, seq_len=72, batches=batches, head=head, precision=precision, device=device
                )
                rows.append({**row, "tokens_per_s": round(rate)})
            except Exception as exc:  # a precision the card lacks is a row that says so
                rows.append({**row, "error": f"{type(exc).__name__}: {exc}"[:300]})
        return {"device": device, "arch": "/".join(map(str, arch)), "vocab": vocab, "bs": bs, "rows": rows}

    return run


def lm_rate(record: dict, bs: int = 64) -> tuple[str, float]:
    """The faster LM head in bf16 at the trainer's batch size and its tokens/s, from the speed step (if it ran)."""
    rows = record.get("steps", {}).get("speed", {}).get("rows", [])
    rated = [
        (row.get("tokens_per_s", 0), row["head"])
        for row in rows
        if row.get("precision") == "bf16" and row.get("bs") == bs and row.get("tokens_per_s")
    ]
    if not rated:
        return "adaptive", 0.0
    rate, head = max(rated)
    return head, float(rate)


def corpus_files() -> list[Path]:
    folder = SHARED / "corpora" / "en"
    return sorted(f for f in folder.glob("*") if f.name.endswith((".txt", ".txt.gz"))) if folder.is_dir() else []


def pretrain(
    root: Path, base: Path, corpus: list[Path], pairs: list[str], trainer_only: bool, timeout: float
) -> subprocess.CompletedProcess:
    """A base LM on the English corpus, published to the project's bucket: `trainctl lm pretrain en`, or the
    trainer's pretrain-lm job on the same bucket layout where trainctl cannot run."""
    if trainer_only:
        from stacks.config import load_config
        from stacks.config.trainer_command import trainer_args

        folder = root / ".trainstack/local/bucket/en/data/corpus"
        folder.mkdir(parents=True, exist_ok=True)  # a second pretrain in the project reuses its corpus and tokens
        for f in corpus:
            if not (folder / f.name).exists():
                shutil.copy(f, folder / f.name)
        config = load_config(root / "envs", "local", pairs)
        run_id = time.strftime("%Y%m%d-%H%M%S-", time.gmtime()) + "0lm0"
        return bounded(
            [sys.executable, "-m", "trainer", *trainer_args(config, "en"), "--job", "pretrain-lm", "--run-id", run_id],
            cwd=root,
            timeout=timeout,
            env=trainer_env(),
        )
    staged = base / "en-corpus"
    (staged / "corpus").mkdir(parents=True, exist_ok=True)
    for f in corpus:
        shutil.copy(f, staged / "corpus" / f.name)
    pushed = trainctl(root, "data", "push", "en", str(staged), timeout=min(timeout, 120))
    if pushed.returncode:
        return pushed
    return trainctl(root, "lm", "pretrain", "en", *sets(pairs), timeout=timeout)


def imdb_step(base: Path, out: Path, dry_run: bool, trainer_only: bool, call: Call):
    def run(limit: float) -> dict:
        task, corpus = SHARED / "datasets" / "en_imdb", corpus_files()
        if not task.exists() or not corpus:
            return {
                "skipped": f"needs {task} and an English corpus in {SHARED / 'corpora' / 'en'} "
                "(the workspace's shared/ folder, or TRAINSTACK_SHARED)"
            }
        started = time.monotonic()
        root = fresh_project(base, "imdb")
        head, rate = lm_rate(call.record)
        size = (TINY if dry_run else GPU_LM) + [f"defaults.trainer.lm_head={head}"]
        # tokens from the speed step's rate (the trainer reached 37 % of a bare step's on an H100), else a cautious
        # 60k tokens/s: the pretrain trains for about 30 % of the step (tokenizing and evaluation besides), the
        # fine-tuning for 40 % of what is left after it, then the classifier
        rate_used = rate * 0.35 if rate else 60_000
        tokens = 100_000 if dry_run else max(100_000, int(rate_used * limit * 0.3))
        result: dict = {"lm_head": head, "speed_rate": rate, "pretrain_tokens": tokens}
        pre = pretrain(
            root, base, corpus, size + [f"defaults.trainer.max_lm_tokens={tokens}"], trainer_only, timeout=limit * 0.5
        )
        said = (pre.stdout + pre.stderr).splitlines()
        result["pretrain"] = {
            "rc": pre.returncode,
            "seconds": round(time.monotonic() - started, 1),
            "lines": [
                line[:200]
                for line in said
                if any(word in line for word in ("epoch", "tokens", "perplexity", "FAILED", "Error"))
            ][-40:],
            "tail": "\n".join(said[-8:])[-900:],
        }
        for variant in ["tfidf"] + (["corpus"] if pre.returncode == 0 else []):
            left = limit - (time.monotonic() - started) - 5
            pairs = list(size)
            if variant == "corpus":
                finetune = 100_000 if dry_run else max(100_000, int(rate_used * left * 0.4))
                result["finetune_tokens"] = finetune
                pairs.append(f"defaults.trainer.max_lm_tokens={finetune}")
            result[variant] = imdb_cell(
                root, base / f"imdb-{variant}.json", variant=variant, pairs=pairs, dry_run=dry_run, timeout=left
            )
        return result

    return run


def loop_step(base: Path, dry_run: bool, before: Path | None):
    def run(limit: float) -> dict:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        sizes, batch_sizes, batches = (["tiny"], ["16"], "10") if dry_run else (["gpu"], ["64", "256"], "60")
        result: dict = {"device": device}
        started = time.monotonic()
        runs = [("after", REPO, ["lm", "clf"])] + ([("before", before, ["lm"])] if before else [])
        for name, root, stages in runs:
            left = limit - (time.monotonic() - started) - 5
            if left < 20:
                result[name] = {"skipped": "out of time"}
                continue
            json_out = base / f"loop-{name}.json"
            r = bounded(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.loop_overhead",
                    "--device",
                    device,
                    "--sizes",
                    *sizes,
                    "--bs",
                    *batch_sizes,
                    "--batches",
                    batches,
                    "--stages",
                    *stages,
                    "--json-out",
                    str(json_out),
                ],
                cwd=root,  # `python -m` puts the folder first on the path: that checkout's trainer is the one timed
                timeout=left * (0.6 if name == "after" and before else 1.0),
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])},
            )
            result[name] = {
                "rc": r.returncode,
                "rows": json.loads(json_out.read_text()) if json_out.exists() else [],
                "table": [line for line in r.stdout.splitlines() if line.startswith("|")],
            }
            if r.returncode:
                result[name]["stderr"] = r.stderr[-1500:]
        return result

    return run


# Base-LM pretrain variants at the GPU envs' size on the same tokens: which one makes the large AWD-LSTM learn
RECIPES = {
    "bf16 lr_base_lm 5e-3": [],
    "bf16 lr_base_lm 2e-3": ["defaults.trainer.lr_base_lm=0.002"],
    "bf16 lr_base_lm 1e-2": ["defaults.trainer.lr_base_lm=0.01"],
    "bf16 lr_base_lm 5e-3 bs 256": ["defaults.trainer.bs=256"],
}


def perplexity_of(said: str) -> float | None:
    found = re.findall(r"base LM: published \S+ \(pretrain, [^)]*?perplexity ([\d.]+)", said)
    return float(found[-1]) if found else None


def recipe_step(base: Path, dry_run: bool, trainer_only: bool):
    def run(limit: float) -> dict:
        task, corpus = SHARED / "datasets" / "en_imdb", corpus_files()
        if not task.exists() or not corpus:
            return {"skipped": f"needs {task} and an English corpus in {SHARED / 'corpora' / 'en'}"}
        started = time.monotonic()
        root = fresh_project(base, "recipe")
        current = root / ".trainstack/local/bucket/en/lm/CURRENT"
        tokens = 100_000 if dry_run else 2_000_000
        rows, currents = [], {}
        for name, extra in list(RECIPES.items())[: 2 if dry_run else None]:
            pairs = [
                *(TINY if dry_run else GPU_LM),
                "defaults.trainer.lm_head=full",
                f"defaults.trainer.max_lm_tokens={tokens}",
                *extra,
            ]
            left = limit * 0.6 - (time.monotonic() - started)
            if left < 20:
                rows.append({"recipe": name, "skipped": "out of time"})
                continue
            t0 = time.monotonic()
            pre = pretrain(root, base, corpus, pairs, trainer_only, timeout=left)
            said = pre.stdout + pre.stderr
            row = {
                "recipe": name,
                "rc": pre.returncode,
                "perplexity": perplexity_of(said),
                "seconds": round(time.monotonic() - t0, 1),
                "rates": re.findall(r"([\d,]+) tokens/s, epoch ETA", said)[-2:],
                "lines": [line[21:200] for line in said.splitlines() if "] epoch " in line][-3:],
            }
            if pre.returncode:
                row["tail"] = said[-600:]
            elif current.exists():
                currents[name] = (current.read_text(), pairs)
            rows.append(row)
        result: dict = {"tokens": tokens, "rows": rows}
        scored = [
            (row["perplexity"], row["recipe"]) for row in rows if row.get("perplexity") and row["recipe"] in currents
        ]
        if not scored:
            return result
        best = min(scored)[1]
        text, pairs = currents[best]
        current.write_text(text)
        finetune = 100_000 if dry_run else 2_000_000
        left = limit - (time.monotonic() - started) - 5
        result["imdb"] = {
            "lm": best,
            "finetune_tokens": finetune,  # the later --set wins
            **imdb_cell(
                root,
                base / "recipe-imdb.json",
                variant="corpus",
                dry_run=dry_run,
                pairs=[*pairs, f"defaults.trainer.max_lm_tokens={finetune}"],
                timeout=left,
            ),
        }
        return result

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where gpu_call.json and the runs' files go ($OUT)")
    parser.add_argument("--budget-s", type=float, default=480, help="the whole call's wall-time budget")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU: the suite's check")
    parser.add_argument(
        "--trainer-only",
        action="store_true",
        help="e2e runs `python -m trainer` alone (default where terraform is not on PATH)",
    )
    parser.add_argument("--steps", nargs="+", default=list(STEPS[:4]), choices=list(STEPS))
    parser.add_argument(
        "--before", type=Path, help="an older checkout (trainer, stacks, envs, benchmarks): the loop step's before"
    )
    args = parser.parse_args(argv)
    trainer_only = args.trainer_only or shutil.which("terraform") is None
    call = Call(args.out, args.budget_s, args.dry_run)
    with tempfile.TemporaryDirectory(prefix="gpu-call-") as tmp:
        base = Path(tmp)
        steps = {
            "env": (env_step, 0.05),
            "speed": (speed_step(args.dry_run), 0.15),
            "e2e": (e2e_step(base, args.out, args.dry_run, trainer_only), 0.35),
            "imdb": (imdb_step(base, args.out, args.dry_run, trainer_only, call), 0.95),
            "recipe": (recipe_step(base, args.dry_run, trainer_only), 0.95),
            "loop": (loop_step(base, args.dry_run, args.before), 0.95),
        }
        for name in args.steps:
            call.step(name, *steps[name])
    call.record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    call.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
