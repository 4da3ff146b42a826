"""`python -m stacks.targets.gcp.sim`: rehearse a gcp configuration on a simulated Google Cloud.

    serve --env NAME [--set KEY=VALUE ...]             run an env's simulated cloud (gcp.simulated) until Ctrl-C or
                                                       SIGTERM; every trainctl command of the env attaches to it
    serve [--scenario FILE] [--port N] [--speedup X]   run a scenario's simulated cloud until Ctrl-C or SIGTERM;
                                                       prints the variables that point trainctl's gcp code at it
    apply STACK_DIR --endpoint URL [--run-id ID]       create a synthesized training stack's resources there
    destroy STACK_DIR --endpoint URL                   delete them

Every line it prints says "simulated": nothing here ever reaches Google.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path

from stacks.errors import ExitStatus, TrainstackError

EXIT_USAGE, EXIT_INFRA = ExitStatus.BAD_INPUT, ExitStatus.INFRA_ERROR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.targets.gcp.sim", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    serve = sub.add_parser("serve", help="run the simulated cloud until Ctrl-C")
    serve.add_argument("--env", default=None, help="serve this env's simulated cloud (its gcp.simulated) to trainctl")
    serve.add_argument("--set", dest="sets", action="append", default=[], help="KEY=VALUE over the env, as trainctl's")
    serve.add_argument("--scenario", type=Path, default=None, help="scenario YAML (default: the shipped one)")
    serve.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    serve.add_argument("--speedup", type=float, default=None, help="simulated seconds per wall second")
    serve.add_argument("--trainer-cmd", default=None, help="what the VM agents run instead of `python -m trainer`")
    for name in ("apply", "destroy"):
        step = sub.add_parser(name, help=f"{name} a synthesized training stack in the simulated cloud")
        step.add_argument("stack_dir", type=Path, help="the stack's folder (holds cdk.tf.json)")
        step.add_argument("--endpoint", required=True, help="the URL `serve` printed")
        if name == "apply":
            step.add_argument("--run-id", default="", help="var.run_id (default: generated)")
    args = parser.parse_args(argv)
    try:
        if args.action == "serve" and args.env:
            return serve_env_until_interrupted(args)
        if args.action == "serve":
            return serve_until_interrupted(args)
        from stacks.targets.gcp.sim import deploy

        if not (args.stack_dir / "cdk.tf.json").is_file():
            print(f"simulated {args.action}: no cdk.tf.json in {args.stack_dir} (run `trainctl synth` first)")
            return EXIT_USAGE
        if args.action == "apply":
            state = deploy.apply(args.stack_dir, args.endpoint, variables={"run_id": args.run_id})
            for name, value in state.outputs.items():
                print(f"simulated apply: output {name} = {value}")
        else:
            state = deploy.destroy(args.stack_dir, args.endpoint)
            print(f"simulated destroy: {len(state.groups)} group(s), {len(state.templates)} template(s) deleted")
        return ExitStatus.SUCCESS
    except TrainstackError as exc:
        said = exc.message if exc.message.startswith("simulated") else f"simulated {args.action}: {exc.message}"
        print(said + (f"\n  → {exc.hint}" if exc.hint else ""))
        return exc.exit_status


def _until_interrupted() -> None:
    """Block until Ctrl-C, SIGTERM or SIGHUP (a closed terminal)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: stop.set())
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # nohup's ignored SIGINT stays ignored
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass


def serve_env_until_interrupted(args) -> int:
    """The env's simulated cloud, as a trainctl command of the env would start it, served until interrupted."""
    from stacks.targets import load_env
    from stacks.targets.gcp.sim.session import say_simulated, serve

    if args.scenario or args.port or args.speedup or args.trainer_cmd:
        print("simulated serve: --env takes the scenario and speedup from the env's gcp.simulated (use --set)")
        return EXIT_USAGE
    root = _project_root()
    config = load_env(root / "envs", args.env, args.sets)
    if config.target != "gcp" or config.gcp.simulated is None:
        print(f"simulated serve: env {args.env} has no gcp.simulated (an env such as envs/gcp-sim.yaml has)")
        return EXIT_USAGE
    session = serve(config, root / ".trainstack" / args.env, root, say_simulated)
    try:
        _until_interrupted()
    finally:
        session.stop()
    return ExitStatus.SUCCESS


def _project_root() -> Path:
    """The project folder trainctl would find from here (stacks.project.Project.discover, a layer above)."""
    from stacks.errors import ConfigError

    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "cdktf.json").is_file() and (folder / "envs").is_dir():
            return folder
    raise ConfigError(f"no trainstack project here ({here})", hint="run it from the project checkout")


def serve_until_interrupted(args) -> int:
    from stacks.targets.gcp.sim.cloud import SimCloud
    from stacks.targets.gcp.sim.scenario import DEFAULT_SCENARIO, load_scenario
    from stacks.targets.gcp.sim.server import SimServer, endpoints
    from stacks.targets.gcp.sim.vms import VmRunner

    path = args.scenario or DEFAULT_SCENARIO
    scenario = load_scenario(path, {"speedup": args.speedup} if args.speedup else None)
    cloud = SimCloud(scenario)
    with SimServer(cloud, port=args.port) as sim, tempfile.TemporaryDirectory(prefix="trainstack-sim-") as work:
        with VmRunner(
            cloud,
            sim.url,
            sim.metadata_host,
            Path(work),
            trainer_cmd=args.trainer_cmd,
            say=lambda line: print(line, flush=True),
        ):
            print(f"simulated Google Cloud at {sim.url}: project {scenario.project}, scenario {path}", flush=True)
            print(f"simulated time: {scenario.speedup:g} s per wall second", flush=True)
            for name, value in endpoints(sim.url).items():
                print(f"export {name}={value}  # simulated Google Cloud", flush=True)
            _until_interrupted()
            print("simulated Google Cloud: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
