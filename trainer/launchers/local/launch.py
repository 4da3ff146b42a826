"""What the local supervisor runs, and its command line, written once: the run (RunSpec) on this machine's share
(processes, cores), in a simulated Spot zone or not. The local target's training stack writes `start`'s line
(stacks/targets/local/local_trainer.py), `start` writes `run`'s, `main` reads them back (parse)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from trainer.launchers.restarts import RestartPolicy
from trainer.launchers.run_spec import RunSpec
from trainer.launchers.trainer_process import GRACE_S

MODULE = "trainer.launchers.local.supervisor"


@dataclass(frozen=True)
class LocalLaunch:
    state_dir: str  # pid, output and exit files: a path, or one the apply completes with the run id
    trainer_args: tuple[str, ...]  # `python -m trainer`'s, with --run-id
    max_run_hours: float = 6.0
    max_restarts: int = 3
    max_restarts_on_errors: int = 0  # trainer.launchers.restarts
    restart_on_exit_codes: tuple[int, ...] = ()
    processes: int = 1  # trainer ranks (gloo) on this machine
    cores: int = 0  # cores to pin the trainer to (0: all of the machine's)
    cores_dir: str | None = None  # the ledger of cores held by this project's local runs
    zone: str | None = None  # the simulated Spot zone of this machine (with market)
    market: str | None = None  # the simulated Spot market, as JSON (trainer.launchers.market)

    @classmethod
    def of(cls, spec: RunSpec, state_dir: str, **machine) -> "LocalLaunch":
        """The launch of a run whose spec has its run id (RunSpec.for_run)."""
        return cls(
            state_dir=state_dir,
            trainer_args=tuple(spec.trainer_command_args),
            max_run_hours=spec.max_run_hours,
            max_restarts=spec.max_restarts,
            max_restarts_on_errors=spec.max_restarts_on_errors,
            restart_on_exit_codes=tuple(spec.restart_on_exit_codes),
            **machine,
        )

    @property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(self.max_restarts_on_errors, tuple(self.restart_on_exit_codes))

    @property
    def state(self) -> Path:
        return Path(self.state_dir)

    def argv(self, action: str) -> list[str]:
        """The supervisor's arguments for `action` (start, run, stop)."""
        if action == "stop":
            return ["stop", "--state-dir", self.state_dir]
        return [
            action,
            "--state-dir",
            self.state_dir,
            "--max-run-hours",
            str(self.max_run_hours),
            "--processes",
            str(self.processes),
            "--max-restarts",
            str(self.max_restarts),
            "--max-restarts-on-errors",
            str(self.max_restarts_on_errors),
            "--restart-on-exit-codes",
            ",".join(map(str, self.restart_on_exit_codes)),
            "--cores",
            str(self.cores),
            *(["--cores-dir", self.cores_dir] if self.cores_dir else []),
            *(["--zone", self.zone, "--market", self.market] if self.market and self.zone else []),
            "--",
            *self.trainer_args,
        ]

    @classmethod
    def parse(cls, argv: list[str], description: str = "") -> tuple[str, "LocalLaunch", float]:
        """(action, launch, stop's seconds before SIGKILL) from `argv` as `argv()` wrote it."""
        parser = argparse.ArgumentParser(
            prog=f"python -m {MODULE}", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        parser.add_argument("action", choices=["start", "run", "stop"])
        parser.add_argument("--state-dir", required=True, help="pid, output and exit files")
        parser.add_argument("--max-run-hours", type=float, default=6.0)
        parser.add_argument("--timeout", type=float, default=GRACE_S, help="stop: seconds before SIGKILL")
        parser.add_argument("--processes", type=int, default=1, help="trainer ranks (gloo) on this machine")
        parser.add_argument("--max-restarts", type=int, default=3, help="restarts of an interrupted trainer")
        parser.add_argument(
            "--max-restarts-on-errors", type=int, default=0, help="restarts after a failure not the code's"
        )
        parser.add_argument("--restart-on-exit-codes", default="", help="the trainer's exit statuses, comma-separated")
        parser.add_argument("--cores", type=int, default=0, help="cores to pin the trainer to (0: all)")
        parser.add_argument("--cores-dir", help="the ledger of cores held by this project's local runs")
        parser.add_argument("--zone", help="the simulated Spot zone of this machine (with --market)")
        parser.add_argument("--market", help="the simulated Spot market, as JSON (trainer.launchers.market)")
        cut = argv.index("--") if "--" in argv else len(argv)
        args, rest = parser.parse_args(argv[:cut]), argv[cut + 1 :]
        launch = cls(
            state_dir=args.state_dir,
            trainer_args=tuple(rest),
            max_run_hours=args.max_run_hours,
            max_restarts=args.max_restarts,
            max_restarts_on_errors=args.max_restarts_on_errors,
            restart_on_exit_codes=tuple(int(c) for c in args.restart_on_exit_codes.split(",") if c.strip()),
            processes=args.processes,
            cores=args.cores,
            cores_dir=args.cores_dir,
            zone=args.zone,
            market=args.market,
        )
        return args.action, launch, args.timeout
