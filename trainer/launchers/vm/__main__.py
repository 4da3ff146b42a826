"""`python -m trainer.launchers.vm`: the trainer VM's agent (runs inside the trainer image on GCE).

    python -m trainer.launchers.vm run [--trainer-cmd CMD]   run this VM's part of the run (startup.sh starts it)
    python -m trainer.launchers.vm stop-group                resize this VM's instance group to 0 now
    python -m trainer.launchers.vm fail REASON               mark the run FAILED (unless it ended), then stop the group

Everything comes from the instance metadata (trainstack-* attributes).
Environment: GCE_METADATA_HOST (metadata server host[:port]), TRAINSTACK_COMPUTE_ENDPOINT
(Compute API endpoint, tests), STORAGE_EMULATOR_HOST (GCS, tests), TRAINSTACK_GRACE_S
(seconds between SIGTERM and SIGKILL at the deadline, default 25), TRAINSTACK_SETTLE_S (several
VMs: how long to wait for rank 0's last status after torchrun fails, default 40) and
TRAINSTACK_REJOIN_PAUSE_S (between two torchrun starts to rejoin the rendezvous, default 10).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import traceback

from trainer.errors import TrainerExit
from trainer.launchers.vm import log

EXIT_AGENT_ERROR = TrainerExit.AGENT_ERROR  # startup.sh then stops the group itself


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.launchers.vm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="run the trainer for this VM's node, then end the run and stop the group")
    run.add_argument(
        "--trainer-cmd",
        default=None,
        help="test hook: command replacing `python -m trainer` (or torchrun); "
        "the trainstack-args and --run-id ID are appended",
    )
    sub.add_parser("stop-group", help="resize this VM's managed instance group to 0")
    fail = sub.add_parser("fail", help="mark the run FAILED (unless it ended), then stop the group")
    fail.add_argument("reason", help="the error recorded in status.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from trainer.launchers.vm.agent import fail_run, run_agent
    from trainer.launchers.vm.group import stop_group
    from trainer.launchers.vm.metadata import MetadataClient

    md = MetadataClient()
    try:
        if args.action == "run":
            launcher = shlex.split(args.trainer_cmd) if args.trainer_cmd else None
            return run_agent(md, launcher)
        if args.action == "fail":
            return fail_run(md, args.reason)
        stop_group(md.require("trainstack-project"), md.require("trainstack-zone"), md.require("trainstack-mig"))
        return 0
    except Exception as exc:  # startup.sh stops billing on any code but 0/143; say why first
        traceback.print_exc()
        log(f"error: {type(exc).__name__}: {exc}")
        return EXIT_AGENT_ERROR


if __name__ == "__main__":
    sys.exit(main())
